#include "views/run_configurations_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace tsr::studio {

RunConfigurationsDialog::RunConfigurationsDialog(std::vector<inspect::RunConfiguration> configurations,
                                                 QString projectDir, QString tesseraBin, int current, QWidget* parent)
    : QDialog(parent),
      m_configs(std::move(configurations)),
      m_projectDir(std::move(projectDir)),
      m_tesseraBin(std::move(tesseraBin)),
      m_list(new QListWidget),
      m_name(new QLineEdit),
      m_launcher(new QComboBox),
      m_devices(new QSpinBox),
      m_processes(new QSpinBox),
      m_hostfile(new QLineEdit),
      m_device(new QComboBox),
      m_overrides(new QPlainTextEdit),
      m_steps(new QSpinBox),
      m_profile(new QCheckBox(tr("Run ▶ Train records a kernel profile (tessera profile) instead"))),
      m_command(new QLabel),
      m_buttons(new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel)) {
  setWindowTitle(tr("Run Configurations"));
  setObjectName("runConfigurationsDialog");
  if (m_configs.empty()) m_configs.push_back({});
  m_current = std::clamp(current, 0, static_cast<int>(m_configs.size()) - 1);

  m_launcher->addItem(tr("This machine"), "local");
  m_launcher->addItem(tr("mpirun (OpenMPI, optionally over a hostfile)"), "mpirun");
  m_launcher->addItem(tr("srun (inside a Slurm allocation)"), "slurm");
  m_device->addItem("CPU", "cpu");
  m_device->addItem("GPU (CUDA)", "cuda");
  m_devices->setRange(1, 256);
  m_devices->setToolTip(tr("Virtual CPU devices in one process (TESSERA_CPU_DEVICES): a [mesh] needs as many as it has"));
  m_processes->setRange(1, 4096);
  m_processes->setToolTip(tr("Ranks, one device each"));
  m_steps->setRange(-1, 1'000'000'000);
  m_steps->setSpecialValueText(tr("the project's [train] steps"));
  m_overrides->setPlaceholderText(tr("one SECTION.KEY=VALUE per line, e.g.\ntrain.lr=3e-4\nmodel.n_layer=4"));
  m_overrides->setMaximumHeight(90);
  m_command->setWordWrap(true);
  m_command->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_command->setObjectName("commandPreview");

  auto* browse = new QPushButton(tr("…"));
  connect(browse, &QPushButton::clicked, this, [this] {
    QString f = QFileDialog::getOpenFileName(this, tr("Hostfile"), m_projectDir);
    if (!f.isEmpty()) m_hostfile->setText(f);
  });
  auto* hostRow = new QHBoxLayout;
  hostRow->addWidget(m_hostfile);
  hostRow->addWidget(browse);
  auto* form = new QFormLayout;
  form->addRow(tr("Name"), m_name);
  form->addRow(tr("Launch on"), m_launcher);
  form->addRow(tr("CPU devices"), m_devices);
  form->addRow(tr("Processes"), m_processes);
  form->addRow(tr("Hostfile"), hostRow);
  form->addRow(tr("Device"), m_device);
  form->addRow(tr("Overrides"), m_overrides);
  form->addRow(tr("Steps"), m_steps);
  form->addRow(QString(), m_profile);
  form->addRow(tr("Command"), m_command);

  auto* add = new QPushButton(tr("Add"));
  auto* remove = new QPushButton(tr("Remove"));
  connect(add, &QPushButton::clicked, this, &RunConfigurationsDialog::addConfiguration);
  connect(remove, &QPushButton::clicked, this, &RunConfigurationsDialog::removeConfiguration);
  auto* left = new QVBoxLayout;
  left->addWidget(m_list);
  auto* listButtons = new QHBoxLayout;
  listButtons->addWidget(add);
  listButtons->addWidget(remove);
  left->addLayout(listButtons);
  auto* columns = new QHBoxLayout;
  columns->addLayout(left, 1);
  columns->addLayout(form, 2);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(columns);
  layout->addWidget(m_buttons);
  connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

  for (const auto& c : m_configs) m_list->addItem(QString::fromStdString(c.name));
  connect(m_list, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row >= 0) showConfiguration(row);
  });
  auto changed = [this] { readForm(); };
  connect(m_name, &QLineEdit::textChanged, this, changed);
  connect(m_launcher, &QComboBox::currentIndexChanged, this, changed);
  connect(m_devices, &QSpinBox::valueChanged, this, changed);
  connect(m_processes, &QSpinBox::valueChanged, this, changed);
  connect(m_hostfile, &QLineEdit::textChanged, this, changed);
  connect(m_device, &QComboBox::currentIndexChanged, this, changed);
  connect(m_overrides, &QPlainTextEdit::textChanged, this, changed);
  connect(m_steps, &QSpinBox::valueChanged, this, changed);
  connect(m_profile, &QCheckBox::toggled, this, changed);
  m_list->setCurrentRow(m_current);
  showConfiguration(m_current);
  resize(760, 460);
}

void RunConfigurationsDialog::showConfiguration(int index) {
  m_current = index;
  const inspect::RunConfiguration& c = m_configs[static_cast<size_t>(index)];
  m_loading = true;
  m_name->setText(QString::fromStdString(c.name));
  m_launcher->setCurrentIndex(m_launcher->findData(QString::fromStdString(c.launcher)));
  m_devices->setValue(c.cpuDevices);
  m_processes->setValue(c.processes);
  m_hostfile->setText(QString::fromStdString(c.hostfile));
  m_device->setCurrentIndex(m_device->findData(QString::fromStdString(c.device)));
  QStringList lines;
  for (const std::string& o : c.overrides) lines << QString::fromStdString(o);
  m_overrides->setPlainText(lines.join('\n'));
  m_steps->setValue(static_cast<int>(std::min<int64_t>(c.steps, 1'000'000'000)));
  m_profile->setChecked(c.profile);
  m_loading = false;
  refresh();
}

void RunConfigurationsDialog::readForm() {
  if (m_loading || m_current < 0 || m_current >= static_cast<int>(m_configs.size())) return;
  inspect::RunConfiguration& c = m_configs[static_cast<size_t>(m_current)];
  c.name = m_name->text().trimmed().toStdString();
  c.launcher = m_launcher->currentData().toString().toStdString();
  c.cpuDevices = m_devices->value();
  c.processes = m_processes->value();
  c.hostfile = m_hostfile->text().trimmed().toStdString();
  c.device = m_device->currentData().toString().toStdString();
  c.overrides.clear();
  for (const QString& line : m_overrides->toPlainText().split('\n', Qt::SkipEmptyParts))
    if (!line.trimmed().isEmpty()) c.overrides.push_back(line.trimmed().toStdString());
  c.steps = m_steps->value();
  c.profile = m_profile->isChecked();
  if (QListWidgetItem* item = m_list->item(m_current)) item->setText(m_name->text());
  refresh();
}

QString RunConfigurationsDialog::commandPreview() const { return m_command->text(); }

void RunConfigurationsDialog::refresh() {
  const inspect::RunConfiguration& c = m_configs[static_cast<size_t>(m_current)];
  const bool local = c.launcher == "local";
  m_devices->setEnabled(local);
  m_processes->setEnabled(!local);
  m_hostfile->setEnabled(c.launcher == "mpirun");
  // The whole list must launch: a bad configuration elsewhere blocks OK too, and says which.
  m_problem.clear();
  for (const auto& other : m_configs) {
    if (other.name.empty()) {
      m_problem = tr("a configuration needs a name");
      break;
    }
    auto cmd = inspect::launchCommand(other, inspect::RunAction::Train, m_projectDir.toStdString(),
                                      m_tesseraBin.toStdString());
    if (!cmd.ok()) {
      m_problem = QString::fromStdString(cmd.error().message);
      break;
    }
  }
  auto cmd = inspect::launchCommand(c, inspect::RunAction::Train, m_projectDir.toStdString(), m_tesseraBin.toStdString());
  m_command->setText(cmd.ok() ? QString::fromStdString(cmd->display()) : QString());
  if (!m_problem.isEmpty()) m_command->setText("<span style='color:#c0392b'>" + m_problem.toHtmlEscaped() + "</span>");
  m_buttons->button(QDialogButtonBox::Ok)->setEnabled(m_problem.isEmpty());
}

void RunConfigurationsDialog::addConfiguration() {
  inspect::RunConfiguration c = m_configs[static_cast<size_t>(m_current)];
  c.name += tr(" (copy)").toStdString();
  m_configs.push_back(c);
  m_list->addItem(QString::fromStdString(c.name));
  m_list->setCurrentRow(static_cast<int>(m_configs.size()) - 1);
}

void RunConfigurationsDialog::removeConfiguration() {
  if (m_configs.size() <= 1) return;  // a project always has one
  const int row = m_current;
  m_configs.erase(m_configs.begin() + row);
  m_loading = true;
  delete m_list->takeItem(row);
  m_loading = false;
  const int next = std::min(row, static_cast<int>(m_configs.size()) - 1);
  m_list->setCurrentRow(next);
  showConfiguration(next);
}

}  // namespace tsr::studio
