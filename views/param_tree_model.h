#pragma once
// The model's parameters as a tree by path ("h" > "3" > "attn" > "c_attn" > "weight"): name, shape, dtype,
// parameter count and bytes; a module row sums what lies below it. A parameter's row shows its sharding in the
// sharding panel's plan and takes a dropped PartitionSpec (kPartitionSpecMime): specDropped follows.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <QAbstractItemModel>

#include "engine/inspect/project_snapshot.h"

namespace tsr::studio {

class ParamTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  // The counts come right after the name: a group's row has nothing else, and they stay in sight in a narrow
  // dock (after the shape and dtype they were cut off at the dock's default width).
  enum Column { Name, Count, Bytes, Shape, DTypeCol, ShardingCol, NumColumns };

  explicit ParamTreeModel(QObject* parent = nullptr);
  ~ParamTreeModel() override;

  void setParams(const std::vector<inspect::ParamInfo>& params);
  // Per parameter path ("h.0.attn.c_attn.weight"): its spec ("P(None, 'model')") and per-device bytes.
  void setShardings(std::map<std::string, std::string> specs);
  // The full path of a row ("h.3.attn").
  QString pathOf(const QModelIndex& index) const;

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QStringList mimeTypes() const override;
  Qt::DropActions supportedDropActions() const override { return Qt::CopyAction; }
  bool canDropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column,
                       const QModelIndex& parent) const override;
  bool dropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column, const QModelIndex& parent) override;

 signals:
  // A PartitionSpec dropped on parameter `path`.
  void specDropped(const QString& path, const QString& spec);

 private:
  struct Row;
  Row* rowOf(const QModelIndex& index) const;
  std::unique_ptr<Row> m_root;
  std::map<std::string, std::string> m_specs;
};

}  // namespace tsr::studio
