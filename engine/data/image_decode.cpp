#include "engine/data/image_decode.h"

#include <algorithm>
#include <csetjmp>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include "engine/data/file_io.h"

namespace tsr::data {

namespace {

// libpng's simplified API reports errors by return value, so no longjmp crosses C++ frames.
Result<Image> decodePng(const std::string& path, const std::string& bytes) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    return makeError("{}: not a PNG image libpng reads: {}", path, png.message);
  if (static_cast<uint64_t>(png.width) * png.height > (uint64_t{1} << 28)) {
    png_image_free(&png);
    return makeError("{}: a PNG image of {}x{} pixels, more than Tessera decodes", path, png.width, png.height);
  }
  png.format = PNG_FORMAT_RGB;
  Image image;
  image.width = png.width;
  image.height = png.height;
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    std::string message = png.message;
    png_image_free(&png);
    return makeError("{}: damaged PNG image: {}", path, message);
  }
  return image;
}

// libjpeg reports errors through error_exit, which must not return: it jumps back to decodeJpeg's setjmp. Only
// plain C state lives between the setjmp and the jump (the pixels are written into storage sized before).
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpegErrorExit(j_common_ptr info) {
  auto* err = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, err->message);
  std::longjmp(err->jump, 1);
}

void jpegSilence(j_common_ptr, int) {}

// Reads the header (0) or the pixels (1) into `out`, whose storage the caller sizes between the two calls.
bool jpegPass(const std::string& bytes, int pass, Image& out, JpegError& err) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpegErrorExit;
  err.mgr.emit_message = jpegSilence;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = JCS_RGB;
  if (pass == 0) {
    jpeg_calc_output_dimensions(&info);
    out.width = info.output_width;
    out.height = info.output_height;
    jpeg_destroy_decompress(&info);
    return true;
  }
  jpeg_start_decompress(&info);
  if (static_cast<int64_t>(info.output_width) != out.width || static_cast<int64_t>(info.output_height) != out.height ||
      info.output_components != 3) {
    std::snprintf(err.message, sizeof err.message, "unexpected output size");
    jpeg_destroy_decompress(&info);
    return false;
  }
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out.pixels.data() + static_cast<size_t>(info.output_scanline) * info.output_width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Result<Image> decodeJpeg(const std::string& path, const std::string& bytes) {
  Image image;
  JpegError err{};
  if (!jpegPass(bytes, 0, image, err)) return makeError("{}: not a JPEG image libjpeg reads: {}", path, err.message);
  if (image.width <= 0 || image.height <= 0 || image.width * image.height > (int64_t{1} << 28))
    return makeError("{}: a JPEG image of {}x{} pixels, more than Tessera decodes", path, image.width, image.height);
  image.pixels.resize(static_cast<size_t>(image.width * image.height * 3));
  if (!jpegPass(bytes, 1, image, err)) return makeError("{}: damaged JPEG image: {}", path, err.message);
  return image;
}

}  // namespace

Result<Image> decodeImage(const std::string& path) {
  TSR_ASSIGN(std::string bytes, readFile(path));
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return decodePng(path, bytes);
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF && static_cast<unsigned char>(bytes[1]) == 0xD8 &&
      static_cast<unsigned char>(bytes[2]) == 0xFF)
    return decodeJpeg(path, bytes);
  return makeError("{}: neither a PNG nor a JPEG image (its first bytes are no image signature)", path);
}

Image resize(const Image& src, int64_t width, int64_t height) {
  if (src.width == width && src.height == height) return src;
  Image out;
  out.width = width;
  out.height = height;
  out.channels = src.channels;
  out.pixels.resize(static_cast<size_t>(width * height * src.channels));
  const double sx = static_cast<double>(src.width) / static_cast<double>(width);
  const double sy = static_cast<double>(src.height) / static_cast<double>(height);
  auto at = [&](int64_t x, int64_t y, int64_t c) {
    return static_cast<double>(src.pixels[static_cast<size_t>((y * src.width + x) * src.channels + c)]);
  };
  for (int64_t y = 0; y < height; ++y) {
    const double fy = std::clamp((static_cast<double>(y) + 0.5) * sy - 0.5, 0.0, static_cast<double>(src.height - 1));
    const auto y0 = static_cast<int64_t>(fy);
    const int64_t y1 = std::min(y0 + 1, src.height - 1);
    const double wy = fy - static_cast<double>(y0);
    for (int64_t x = 0; x < width; ++x) {
      const double fx = std::clamp((static_cast<double>(x) + 0.5) * sx - 0.5, 0.0, static_cast<double>(src.width - 1));
      const auto x0 = static_cast<int64_t>(fx);
      const int64_t x1 = std::min(x0 + 1, src.width - 1);
      const double wx = fx - static_cast<double>(x0);
      for (int64_t c = 0; c < src.channels; ++c) {
        const double v = (1 - wy) * ((1 - wx) * at(x0, y0, c) + wx * at(x1, y0, c)) +
                         wy * ((1 - wx) * at(x0, y1, c) + wx * at(x1, y1, c));
        out.pixels[static_cast<size_t>((y * width + x) * src.channels + c)] = static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return out;
}

}  // namespace tsr::data
