#pragma once
// PNG and JPEG images decoded by the Debian libraries made for them (libpng, libjpeg-turbo) into 8-bit RGB
// pixels, and the resampling and cropping the image datasets apply. Decoding never aborts: a damaged or foreign
// file is an error naming it.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"

namespace tsr::data {

// 8-bit pixels, row by row, `channels` (1 or 3) to a pixel: [height, width, channels].
struct Image {
  int64_t width = 0, height = 0, channels = 3;
  std::vector<uint8_t> pixels;
};

// Decodes a PNG or JPEG file (told apart by their signatures) into RGB; grey, palette, 16-bit and alpha images
// are converted (alpha dropped).
Result<Image> decodeImage(const std::string& path);

// Bilinear resampling to width x height (pixel centres aligned, so the same size returns the same pixels).
Image resize(const Image& image, int64_t width, int64_t height);

}  // namespace tsr::data
