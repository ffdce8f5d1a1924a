#pragma once
// File › Preferences…: the IDE's own settings, kept in QSettings with the layout and the theme (a project's
// settings live in its project.toml, its run configurations in .tessera/). The run store's lock wait: how long
// the IDE and the runs it starts wait for a runs.db another process holds locked before they fail saying so;
// left at its default, TESSERA_STORE_LOCK_WAIT's seconds, else 30, and the box says which.
#include <optional>

#include <QDialog>

class QDoubleSpinBox;

namespace tsr::studio {

class PreferencesDialog : public QDialog {
  Q_OBJECT
 public:
  // lockWait: the saved preference in seconds; none: the default.
  explicit PreferencesDialog(std::optional<double> lockWait, QWidget* parent = nullptr);

  // What the form says: none when the box is at its default.
  std::optional<double> lockWait() const;
  QDoubleSpinBox* lockWaitBox() const { return m_lockWait; }
  // The wait without a preference, as the box shows it: "default: 30 s", or "default: 5 s
  // (TESSERA_STORE_LOCK_WAIT)".
  static QString defaultLockWaitText();

 private:
  QDoubleSpinBox* m_lockWait;
};

}  // namespace tsr::studio
