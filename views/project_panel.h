#pragma once
// The Project panel: the parameter tree (path, shape, dtype, bytes), a settings form for the model, data,
// training and mesh that validates as the user types (with the engine's own parser) and writes project.toml
// back with its comments, and the file itself, where error locations open. A project that does not open shows
// its error with "Open project.toml": the file in an editor with the error's line marked, whose Save opens the
// project again.
#include <QMap>
#include <QWidget>

#include "engine/inspect/project_edit.h"
#include "views/session.h"

class QFormLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QTabWidget;
class QTreeView;

namespace tsr::studio {

class ParamTreeModel;
class ProjectFileEditor;

class ProjectPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ProjectPanel(Session* session, QWidget* parent = nullptr);

  ParamTreeModel* paramModel() const { return m_params; }
  QTreeView* paramView() const { return m_tree; }
  // The form's field for section.key, e.g. field("train", "lr").
  QLineEdit* field(const QString& section, const QString& key) const;
  QString validationError() const { return m_error; }
  QString editedText() const { return m_edited; }
  bool canSave() const;
  // Writes the edited text to project.toml; false (and the error in the console) when invalid.
  bool save();
  // Shows a project.toml (the open project's when file is empty) at a 1-based line.
  void showFileLine(const QString& file, int line);
  void showTab(int index);
  // The project.toml text view (its cursor is on the line showFileLine went to).
  QPlainTextEdit* fileView() const { return m_file; }
  bool fileViewShown() const;
  // The project.toml of a project that failed to open, in its editor with the error marked (as "Open
  // project.toml" does); the editor, or null before it was first opened.
  void openFileEditor();
  ProjectFileEditor* fileEditor() const { return m_editor; }
  // An error to show in one line: a Python traceback as "file:line: Exception: what" (the innermost frame in
  // `file`, the file the error is about, else the innermost one); another message as its first and last lines.
  // The whole message is in the console.
  static QString failureSummary(const QString& message, const QString& file);

 signals:
  void saved(const QString& file);
  // The file editor saved a project.toml: the project in `dir` is to be opened again.
  void reopenRequested(const QString& dir);

 private:
  void onProjectOpened();
  // The project asked for did not open: its project.toml is shown as it is, and nothing of the last project.
  void onProjectClosed();
  void loadForm(const QString& text);
  void buildForm(const std::string& family);
  void revalidate();

  Session* m_session;
  QTabWidget* m_tabs;
  QLabel* m_summary;
  QPushButton* m_openFile;  // "Open project.toml", shown while the last project failed to open
  ProjectFileEditor* m_editor = nullptr;
  QString m_failure;        // that project's error
  QTreeView* m_tree;
  ParamTreeModel* m_params;
  QFormLayout* m_form = nullptr;
  std::string m_formFamily;                    // whose keys the form shows
  std::vector<inspect::ProjectField> m_formFields;
  QMap<QString, QLineEdit*> m_fields;  // "train.lr"
  QWidget* m_settings = nullptr;  // the Settings tab: off while no project is open
  QLabel* m_errorLabel;
  QPushButton* m_save;
  QPlainTextEdit* m_file;
  QString m_original;  // project.toml as read
  QString m_edited;    // with the form's values
  QString m_error;
  bool m_loading = false;
};

}  // namespace tsr::studio
