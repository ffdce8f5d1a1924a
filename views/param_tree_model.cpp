#include "views/param_tree_model.h"

#include <functional>

#include <QLocale>
#include <QMimeData>

#include "views/session.h"

namespace tsr::studio {

struct ParamTreeModel::Row {
  QString name;
  QString path;
  Row* parent = nullptr;
  int indexInParent = 0;
  std::vector<std::unique_ptr<Row>> children;
  const inspect::ParamInfo* leaf = nullptr;
  inspect::ParamInfo info;  // a copy for leaves
  int64_t numel = 0, bytes = 0;

  Row* child(const QString& n) {
    for (auto& c : children)
      if (c->name == n) return c.get();
    auto r = std::make_unique<Row>();
    r->name = n;
    r->path = path.isEmpty() ? n : path + "." + n;
    r->parent = this;
    r->indexInParent = static_cast<int>(children.size());
    children.push_back(std::move(r));
    return children.back().get();
  }
};

ParamTreeModel::ParamTreeModel(QObject* parent) : QAbstractItemModel(parent), m_root(std::make_unique<Row>()) {}
ParamTreeModel::~ParamTreeModel() = default;

void ParamTreeModel::setParams(const std::vector<inspect::ParamInfo>& params) {
  beginResetModel();
  m_root = std::make_unique<Row>();
  for (const auto& p : params) {
    Row* r = m_root.get();
    for (const QString& part : QString::fromStdString(p.path).split('.')) r = r->child(part);
    r->info = p;
    r->leaf = &r->info;
    for (Row* a = r; a; a = a->parent) {
      a->numel += p.numel;
      a->bytes += p.bytes;
    }
  }
  endResetModel();
}

ParamTreeModel::Row* ParamTreeModel::rowOf(const QModelIndex& index) const {
  return index.isValid() ? static_cast<Row*>(index.internalPointer()) : m_root.get();
}

QString ParamTreeModel::pathOf(const QModelIndex& index) const { return rowOf(index)->path; }

QModelIndex ParamTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (!hasIndex(row, column, parent)) return {};
  Row* p = rowOf(parent);
  return createIndex(row, column, p->children[static_cast<size_t>(row)].get());
}

QModelIndex ParamTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid()) return {};
  Row* r = rowOf(child);
  if (!r->parent || r->parent == m_root.get()) return {};
  return createIndex(r->parent->indexInParent, 0, r->parent);
}

int ParamTreeModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() && parent.column() != 0) return 0;
  return static_cast<int>(rowOf(parent)->children.size());
}

int ParamTreeModel::columnCount(const QModelIndex&) const { return NumColumns; }

QVariant ParamTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  Row* r = rowOf(index);
  if (role == Qt::ToolTipRole) return r->path;
  if (role == Qt::TextAlignmentRole && (index.column() == Count || index.column() == Bytes))
    return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  QLocale loc(QLocale::English);
  switch (index.column()) {
    case Name: return r->name;
    case Shape: return r->leaf ? QString("[%1]").arg(QString::fromStdString(joinInts(r->leaf->shape.dims(), ", "))) : QString();
    case DTypeCol: return r->leaf ? QString::fromStdString(std::string(dtypeName(r->leaf->dtype))) : QString();
    case Count: return loc.toString(static_cast<qlonglong>(r->numel));
    case Bytes: return QString::fromStdString(inspect::formatBytes(r->bytes));
    case ShardingCol: {
      auto it = r->leaf ? m_specs.find(r->path.toStdString()) : m_specs.end();
      return it == m_specs.end() ? QString() : QString::fromStdString(it->second);
    }
  }
  return {};
}

QVariant ParamTreeModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("Parameter");
    case Shape: return tr("Shape");
    case DTypeCol: return tr("DType");
    case Count: return tr("Elements");
    case Bytes: return tr("Bytes");
    case ShardingCol: return tr("Sharding");
  }
  return {};
}

void ParamTreeModel::setShardings(std::map<std::string, std::string> specs) {
  m_specs = std::move(specs);
  // Every level's rows, column Sharding.
  std::function<void(Row*)> changed = [&](Row* r) {
    if (r->children.empty()) return;
    Row* first = r->children.front().get();
    Row* last = r->children.back().get();
    emit dataChanged(createIndex(first->indexInParent, ShardingCol, first), createIndex(last->indexInParent, ShardingCol, last));
    for (auto& c : r->children) changed(c.get());
  };
  changed(m_root.get());
}

Qt::ItemFlags ParamTreeModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractItemModel::flags(index);
  if (index.isValid() && rowOf(index)->leaf) f |= Qt::ItemIsDropEnabled;
  return f;
}

QStringList ParamTreeModel::mimeTypes() const { return {kPartitionSpecMime}; }

bool ParamTreeModel::canDropMimeData(const QMimeData* data, Qt::DropAction, int, int, const QModelIndex& parent) const {
  return data && data->hasFormat(kPartitionSpecMime) && parent.isValid() && rowOf(parent)->leaf;
}

bool ParamTreeModel::dropMimeData(const QMimeData* data, Qt::DropAction action, int row, int column,
                                  const QModelIndex& parent) {
  if (!canDropMimeData(data, action, row, column, parent)) return false;
  emit specDropped(rowOf(parent)->path, QString::fromUtf8(data->data(kPartitionSpecMime)));
  return true;
}

}  // namespace tsr::studio
