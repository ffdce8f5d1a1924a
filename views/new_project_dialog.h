#pragma once
// File › New Project…: a project from a model family's declaration. The family's [model] keys appear as a
// form (defaults as placeholders, doc strings as tooltips and hints), a text family asks for its corpus, and the
// project.toml the choices make is previewed and checked with the engine's parser as the user types; Create is
// enabled only for a project that opens.
#include <QDialog>
#include <QMap>

#include "engine/inspect/new_project.h"

class QComboBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;

namespace tsr::studio {

class NewProjectDialog : public QDialog {
  Q_OBJECT
 public:
  explicit NewProjectDialog(const QString& defaultFolder, QWidget* parent = nullptr);

  QComboBox* familyBox() const { return m_family; }
  QLineEdit* keyField(const QString& key) const { return m_keys.value(key, nullptr); }
  QLineEdit* folderField() const { return m_folder; }
  QLineEdit* corpusField() const { return m_corpus; }
  QPushButton* createButton() const { return m_create; }
  QString error() const { return m_error; }
  QString projectToml() const { return m_toml; }

  // Writes the project (project.toml, the corpus copied into data/) into the folder; false with the reason in
  // error() when it cannot. The dialog calls it on Create; tests call it directly.
  bool createProject();
  QString createdFolder() const { return m_created; }

 private:
  void onFamilyChanged();
  void refresh();

  QComboBox* m_family;
  QLabel* m_description;
  QFormLayout* m_keyForm;
  QMap<QString, QLineEdit*> m_keys;
  QLineEdit* m_name;
  QLineEdit* m_folder;
  QLineEdit* m_corpus;
  QPushButton* m_corpusBrowse;
  QPlainTextEdit* m_preview;
  QLabel* m_errorLabel;
  QPushButton* m_create;
  QString m_error;
  QString m_toml;
  inspect::NewProject m_spec;  // what m_toml was written from (and the starter files with it)
  QString m_created;  // the folder createProject wrote
};

}  // namespace tsr::studio
