#pragma once
// Run › Edit Configurations…: the project's run configurations as a list and a form, as VS Code's launch.json
// and Qt Creator's run settings are edited. Each configuration has a launcher (this machine with N virtual CPU
// devices, mpirun with N processes and an optional hostfile, or srun inside a Slurm allocation), a device, --set
// overrides, steps and profile on/off; the command it launches is shown as the user edits, and a configuration
// that cannot launch (no processes, a hostfile that does not exist, a bad override) says why and blocks OK.
#include <vector>

#include <QDialog>

#include "engine/inspect/run_configuration.h"

class QCheckBox;
class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QSpinBox;

namespace tsr::studio {

class RunConfigurationsDialog : public QDialog {
  Q_OBJECT
 public:
  RunConfigurationsDialog(std::vector<inspect::RunConfiguration> configurations, QString projectDir,
                          QString tesseraBin, int current, QWidget* parent = nullptr);

  const std::vector<inspect::RunConfiguration>& configurations() const { return m_configs; }
  int currentIndex() const { return m_current; }
  // The form's widgets, for tests.
  QListWidget* list() const { return m_list; }
  QLineEdit* nameField() const { return m_name; }
  QComboBox* launcherBox() const { return m_launcher; }
  QSpinBox* devicesBox() const { return m_devices; }
  QSpinBox* processesBox() const { return m_processes; }
  QLineEdit* hostfileField() const { return m_hostfile; }
  QPlainTextEdit* overridesField() const { return m_overrides; }
  QSpinBox* stepsBox() const { return m_steps; }
  QCheckBox* profileBox() const { return m_profile; }
  QString commandPreview() const;
  QString problem() const { return m_problem; }
  void addConfiguration();
  void removeConfiguration();

 private:
  void showConfiguration(int index);
  void readForm();
  void refresh();

  std::vector<inspect::RunConfiguration> m_configs;
  QString m_projectDir, m_tesseraBin;
  int m_current = 0;
  bool m_loading = false;
  QString m_problem;
  QListWidget* m_list;
  QLineEdit* m_name;
  QComboBox* m_launcher;
  QSpinBox* m_devices;
  QSpinBox* m_processes;
  QLineEdit* m_hostfile;
  QComboBox* m_device;
  QPlainTextEdit* m_overrides;
  QSpinBox* m_steps;
  QCheckBox* m_profile;
  QLabel* m_command;
  QDialogButtonBox* m_buttons;
};

}  // namespace tsr::studio
