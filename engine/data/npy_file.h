#pragma once
// NumPy arrays on disk, memory-mapped: .npy files and the stored (uncompressed) members of .npz archives, as
// np.save and np.savez write them. Nothing is read whole into memory; a row is converted when it is asked for.
//
// .npy (format versions 1, 2 and 3): the magic "\x93NUMPY", major and minor version bytes, the header length
// (u16 for version 1, u32 for 2 and 3), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
// padded with spaces and a newline, then the data in C order. Every part is checked: the dict's three keys,
// a little-endian dtype Tessera reads (f4, f2, i4, i8, u1), C order, and a shape whose bytes are exactly the
// data's. An .npz is a zip archive of .npy members; a member stored without compression is mapped in place, a
// compressed one (np.savez_compressed) is refused, since it could only be read by inflating it into memory.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/file_io.h"

namespace tsr::data {

enum class NpyDType { F32, F16, I32, I64, U8 };
const char* npyDTypeName(NpyDType t);  // "float32", "float16", "int32", "int64", "uint8"
int npyDTypeBytes(NpyDType t);

// One array: a view into a mapped file that it keeps open.
class NpyArray {
 public:
  // `spec` is "file.npy", "file.npz:member" (member "x" or "x.npy") or "file.npz" when it holds one member.
  static Result<NpyArray> open(const std::string& spec);
  // Parses the .npy bytes at [offset, offset + size) of an open file; `name` is what errors call it.
  static Result<NpyArray> parse(std::shared_ptr<const MappedFile> file, size_t offset, size_t size,
                                const std::string& name);

  const std::string& name() const { return m_name; }  // "train.npy" or "train.npz:x.npy", for messages
  NpyDType dtype() const { return m_dtype; }
  const std::vector<int64_t>& shape() const { return m_shape; }
  std::string shapeText() const;  // "(60000, 784)"
  int64_t rows() const { return m_shape.empty() ? 1 : m_shape[0]; }
  int64_t rowElements() const;  // elements of one row (of the first axis)

  // Row `row` as floats, each times `scale`.
  void rowAsFloat(int64_t row, float scale, float* out) const;
  // Element `i` (flat, C order) of an integer array, widened.
  int64_t integerAt(int64_t i) const;
  bool isInteger() const { return m_dtype == NpyDType::I32 || m_dtype == NpyDType::I64 || m_dtype == NpyDType::U8; }

 private:
  std::shared_ptr<const MappedFile> m_file;
  std::string m_name;
  NpyDType m_dtype = NpyDType::F32;
  std::vector<int64_t> m_shape;
  const uint8_t* m_data = nullptr;
};

float halfToFloat(uint16_t h);

}  // namespace tsr::data
