#pragma once
// The Source panel: a Python model project's model.py in an editor (Python highlighting, line numbers). The file
// is watched: saved from here (Ctrl+S) or from any other editor, the project is traced again in the background,
// and the panels update in place (the session keeps the selected node where it still exists). A trace that fails
// lists its traceback under Problems; a click goes to the line. Selecting a graph node marks its line; putting
// the cursor on a line selects the first of its nodes in the stage on screen.
#include <QWidget>

#include "views/session.h"

class QFileSystemWatcher;
class QLabel;
class QListWidget;
class QPushButton;
class QTimer;

namespace tsr::studio {

class CodeEdit;

class SourcePanel : public QWidget {
  Q_OBJECT
 public:
  explicit SourcePanel(Session* session, QWidget* parent = nullptr);

  QString file() const { return m_file; }  // the model file shown; empty for a project without one
  CodeEdit* editor() const { return m_edit; }
  QListWidget* problems() const { return m_problems; }
  int markedLine() const { return m_markedLine; }  // the selected node's line (1-based), 0 when none
  // Writes the editor's text to the file; the watcher then re-traces. False (and why, in the console) when it
  // cannot be written.
  bool save();

 signals:
  // The model file changed: the project in `dir` is to be opened again.
  void reopenRequested(const QString& dir);

 private:
  void showProject(const QString& path);
  void load();
  void onFileChanged();
  void onFailed(const QString& message);
  void onNodeSelected(int node);
  void onCursorMoved();
  void mark(int line);

  Session* m_session;
  QLabel* m_header;
  CodeEdit* m_edit;
  QPushButton* m_save;
  QListWidget* m_problems;
  QFileSystemWatcher* m_watcher;
  QTimer* m_reopen;
  QString m_dir, m_file;
  QByteArray m_diskText;  // the file as last read or written
  int m_markedLine = 0;
  bool m_marking = false;  // the panel moves the cursor itself (a node was selected, the file read): no selection
};

}  // namespace tsr::studio
