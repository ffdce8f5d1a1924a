#pragma once
// The model's parameters as a tree by path ("h" > "3" > "attn" > "c_attn" > "weight"): name, shape, dtype,
// parameter count and bytes; a module row sums what lies below it.
#include <memory>
#include <vector>

#include <QAbstractItemModel>

#include "engine/inspect/project_snapshot.h"

namespace tsr::studio {

class ParamTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  enum Column { Name, Shape, DTypeCol, Count, Bytes, NumColumns };

  explicit ParamTreeModel(QObject* parent = nullptr);
  ~ParamTreeModel() override;

  void setParams(const std::vector<inspect::ParamInfo>& params);
  // The full path of a row ("h.3.attn").
  QString pathOf(const QModelIndex& index) const;

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  struct Row;
  Row* rowOf(const QModelIndex& index) const;
  std::unique_ptr<Row> m_root;
};

}  // namespace tsr::studio
