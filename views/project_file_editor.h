#pragma once
// project.toml in an editor of its own, for a project that does not open: line numbers, the error's line marked
// and the cursor on it, the text checked with the engine's parser as it is typed (the mark follows). Save writes
// the file and asks for the project to be opened again; the error of that attempt, if any, is marked in turn.
#include <QDialog>

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTimer;

namespace tsr::studio {

class CodeEdit;

class ProjectFileEditor : public QDialog {
  Q_OBJECT
 public:
  explicit ProjectFileEditor(const QString& file, QWidget* parent = nullptr);

  QString file() const { return m_file; }
  QPlainTextEdit* editor() const;
  // The width of the line numbers' margin, in pixels.
  int lineNumberWidth() const;
  int markedLine() const { return m_markedLine; }  // 1-based; 0 when no line is marked
  QString error() const { return m_error; }

  // Reads the file again (false when it cannot be read).
  bool load();
  // Shows an error of the project parser: its line ("project.toml:LINE: ...") marked, the cursor on it.
  void setError(const QString& message);
  // Writes the text to the file; saved() follows. False, with the reason shown, when it cannot be written.
  bool save();

 signals:
  void saved(const QString& file);

 private:
  void validate();
  void mark(int line);

  QString m_file;
  CodeEdit* m_edit;
  QLabel* m_message;
  QPushButton* m_save;
  QTimer* m_timer;
  QString m_error;
  int m_markedLine = 0;
};

}  // namespace tsr::studio
