#include "views/preferences_dialog.h"

#include <algorithm>
#include <chrono>

#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "engine/inspect/environment.h"

namespace tsr::studio {

namespace {
// The longest wait --lock-wait takes (a day).
constexpr double kMaxLockWait = 86400;
}  // namespace

PreferencesDialog::PreferencesDialog(std::optional<double> lockWait, QWidget* parent)
    : QDialog(parent), m_lockWait(new QDoubleSpinBox) {
  setWindowTitle(tr("Preferences"));
  setObjectName("preferencesDialog");
  // 0, the box's minimum, stands for the default: the CLI takes no wait of 0 s.
  m_lockWait->setRange(0, kMaxLockWait);
  m_lockWait->setDecimals(1);
  m_lockWait->setSuffix(tr(" s"));
  m_lockWait->setSpecialValueText(defaultLockWaitText());
  m_lockWait->setValue(lockWait ? std::clamp(*lockWait, 0.1, kMaxLockWait) : 0);
  m_lockWait->setObjectName("lockWait");
  m_lockWait->setToolTip(tr("Runs started from the IDE get it as --lock-wait SECONDS"));
  auto* about = new QLabel(tr("How long the IDE and the runs it starts wait for a run store (runs.db) that another "
                              "process holds locked, a training run writing a large profile say, before they "
                              "fail saying so. Set it to 0 for the default."));
  about->setWordWrap(true);

  auto* form = new QFormLayout;
  form->addRow(tr("Wait for a locked store"), m_lockWait);
  form->addRow(about);
  auto* store = new QGroupBox(tr("Run store"));
  store->setLayout(form);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(store);
  layout->addStretch();
  layout->addWidget(buttons);
  resize(460, sizeHint().height());
}

std::optional<double> PreferencesDialog::lockWait() const {
  if (m_lockWait->value() <= 0) return std::nullopt;
  return m_lockWait->value();
}

QString PreferencesDialog::defaultLockWaitText() {
  if (const std::optional<double> s = inspect::envOptions().storeLockWait)
    return tr("default: %1 s (TESSERA_STORE_LOCK_WAIT)").arg(*s);
  return tr("default: %1 s").arg(std::chrono::duration<double>(inspect::kDefaultLockWait).count());
}

}  // namespace tsr::studio
