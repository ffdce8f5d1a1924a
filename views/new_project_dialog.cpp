#include "views/new_project_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QVBoxLayout>

namespace tsr::studio {

namespace {

const project::ModelFamily* familyNamed(const QString& name) {
  for (const project::ModelFamily* f : inspect::modelFamilies())
    if (QString::fromStdString(f->name) == name) return f;
  return nullptr;
}

}  // namespace

NewProjectDialog::NewProjectDialog(const QString& defaultFolder, QWidget* parent)
    : QDialog(parent),
      m_family(new QComboBox),
      m_description(new QLabel),
      m_keyForm(new QFormLayout),
      m_name(new QLineEdit),
      m_folder(new QLineEdit(defaultFolder)),
      m_corpus(new QLineEdit),
      m_corpusBrowse(new QPushButton(tr("Browse…"))),
      m_preview(new QPlainTextEdit),
      m_errorLabel(new QLabel),
      m_create(nullptr) {
  setObjectName("newProjectDialog");
  setWindowTitle(tr("New Project"));
  for (const project::ModelFamily* f : inspect::modelFamilies()) {
    QString origin = f->origin == "core" ? QString() : tr(" (plugin)");
    m_family->addItem(QString::fromStdString(f->name) + origin, QString::fromStdString(f->name));
  }
  m_description->setWordWrap(true);
  m_name->setPlaceholderText(tr("the folder's name"));
  m_corpus->setPlaceholderText(tr("a UTF-8 text file, copied into the project's data/ folder"));
  auto* folderBrowse = new QPushButton(tr("Browse…"));
  connect(folderBrowse, &QPushButton::clicked, this, [this] {
    QString dir = QFileDialog::getExistingDirectory(this, tr("The new project's folder"), m_folder->text());
    if (!dir.isEmpty()) m_folder->setText(dir);
  });
  connect(m_corpusBrowse, &QPushButton::clicked, this, [this] {
    QString file = QFileDialog::getOpenFileName(this, tr("The corpus to train on"), QDir::homePath(),
                                                tr("Text (*.txt);;All files (*)"));
    if (!file.isEmpty()) m_corpus->setText(file);
  });

  auto* top = new QFormLayout;
  top->addRow(tr("Model family"), m_family);
  top->addRow(QString(), m_description);
  top->addRow(tr("Name"), m_name);
  auto* folderRow = new QHBoxLayout;
  folderRow->addWidget(m_folder, 1);
  folderRow->addWidget(folderBrowse);
  top->addRow(tr("Folder"), folderRow);
  auto* corpusRow = new QHBoxLayout;
  corpusRow->addWidget(m_corpus, 1);
  corpusRow->addWidget(m_corpusBrowse);
  top->addRow(tr("Corpus"), corpusRow);

  m_preview->setReadOnly(true);
  m_preview->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_errorLabel->setWordWrap(true);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel);
  m_create = buttons->addButton(tr("Create"), QDialogButtonBox::AcceptRole);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(m_create, &QPushButton::clicked, this, [this] {
    if (createProject()) accept();
    else m_errorLabel->setText(QString("<span style=\"color:#d04040\">%1</span>").arg(m_error.toHtmlEscaped()));
  });

  auto* keys = new QWidget;
  keys->setLayout(m_keyForm);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(new QLabel(tr("<b>[model]</b>")));
  layout->addWidget(keys);
  layout->addWidget(new QLabel(tr("project.toml")));
  layout->addWidget(m_preview, 1);
  layout->addWidget(m_errorLabel);
  layout->addWidget(buttons);
  resize(640, 720);

  connect(m_family, &QComboBox::currentIndexChanged, this, &NewProjectDialog::onFamilyChanged);
  for (QLineEdit* e : {m_name, m_folder, m_corpus}) connect(e, &QLineEdit::textChanged, this, &NewProjectDialog::refresh);
  onFamilyChanged();
}

void NewProjectDialog::onFamilyChanged() {
  while (m_keyForm->rowCount() > 0) m_keyForm->removeRow(0);
  m_keys.clear();
  const project::ModelFamily* f = familyNamed(m_family->currentData().toString());
  if (!f) return;
  m_description->setText(QString::fromStdString(f->description));
  for (const project::FamilyKey& k : f->keys) {
    auto* edit = new QLineEdit;
    QString name = QString::fromStdString(k.name);
    edit->setObjectName("key." + name);
    edit->setPlaceholderText(QString::fromStdString(project::keyValueToml(k.defaultValue)));
    edit->setToolTip(QString::fromStdString(k.help + " (must be " + k.describeRequirement() + ")"));
    m_keys.insert(name, edit);
    m_keyForm->addRow(name, edit);
    connect(edit, &QLineEdit::textChanged, this, &NewProjectDialog::refresh);
  }
  const bool text = !f->dataKinds.empty() && f->dataKinds.front() == "text";
  m_corpus->setEnabled(text);
  m_corpusBrowse->setEnabled(text);
  refresh();
}

void NewProjectDialog::refresh() {
  const QString family = m_family->currentData().toString();
  inspect::NewProject spec;
  spec.family = family.toStdString();
  QString folder = m_folder->text().trimmed();
  spec.name = m_name->text().trimmed().isEmpty() ? QFileInfo(folder).fileName().toStdString()
                                                 : m_name->text().trimmed().toStdString();
  for (auto it = m_keys.begin(); it != m_keys.end(); ++it)
    if (!it.value()->text().trimmed().isEmpty()) spec.values[it.key().toStdString()] = it.value()->text().toStdString();
  if (m_corpus->isEnabled() && !m_corpus->text().trimmed().isEmpty())
    spec.corpus = "data/" + QFileInfo(m_corpus->text().trimmed()).fileName().toStdString();
  auto toml = inspect::newProjectToml(spec);
  m_spec = spec;
  m_error.clear();
  m_toml.clear();
  if (toml.ok()) m_toml = QString::fromStdString(*toml);
  else m_error = QString::fromStdString(toml.error().message);
  if (m_error.isEmpty() && folder.isEmpty()) m_error = tr("choose the project's folder");
  if (m_error.isEmpty() && QFileInfo::exists(QDir(folder).filePath("project.toml")))
    m_error = tr("%1 already holds a project.toml").arg(folder);
  if (m_error.isEmpty() && m_corpus->isEnabled() && !QFileInfo(m_corpus->text().trimmed()).isFile())
    m_error = tr("the corpus %1 is not a file").arg(m_corpus->text().trimmed());
  m_preview->setPlainText(m_toml);
  m_errorLabel->setText(m_error.isEmpty() ? QString() : QString("<span style=\"color:#d04040\">%1</span>").arg(m_error.toHtmlEscaped()));
  m_create->setEnabled(m_error.isEmpty());
}

bool NewProjectDialog::createProject() {
  refresh();
  if (!m_error.isEmpty()) return false;
  QDir dir(m_folder->text().trimmed());
  if (!dir.exists() && !QDir().mkpath(dir.path())) {
    m_error = tr("cannot create %1").arg(dir.path());
    return false;
  }
  if (m_corpus->isEnabled()) {
    QString corpus = m_corpus->text().trimmed();
    QString target = dir.filePath("data/" + QFileInfo(corpus).fileName());
    if (!QDir().mkpath(dir.filePath("data")) || (!QFileInfo::exists(target) && !QFile::copy(corpus, target))) {
      m_error = tr("cannot copy %1 to %2").arg(corpus, target);
      return false;
    }
  }
  QSaveFile f(dir.filePath("project.toml"));
  if (!f.open(QIODevice::WriteOnly) || f.write(m_toml.toUtf8()) < 0 || !f.commit()) {
    m_error = tr("cannot write %1").arg(dir.filePath("project.toml"));
    return false;
  }
  // A Python family's starter model.py (a file of that name already there is the user's and stays).
  for (const auto& [name, content] : inspect::newProjectFiles(m_spec)) {
    const QString path = dir.filePath(QString::fromStdString(name));
    if (QFileInfo::exists(path)) continue;
    QDir().mkpath(QFileInfo(path).absolutePath());
    QSaveFile model(path);
    if (!model.open(QIODevice::WriteOnly) || model.write(QByteArray::fromStdString(content)) < 0 || !model.commit()) {
      m_error = tr("cannot write %1").arg(path);
      return false;
    }
  }
  m_created = dir.absolutePath();
  return true;
}

}  // namespace tsr::studio
