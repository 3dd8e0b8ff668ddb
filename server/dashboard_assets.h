// The dashboard's files (web/), embedded in sundiald at build time by server/embed_assets.cmake
// (the generated dashboard_assets.cc lives in the build directory). Nothing is read from disk
// or fetched from anywhere at run time.
#pragma once

#include <span>
#include <string_view>

namespace sundial::server {

struct EmbeddedAsset {
  std::string_view path;          // URL path: "/app.js" for web/app.js
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view etag;          // a strong, quoted ETag: "\"<32 hex digits of SHA-256>\""
  std::string_view body;
  std::string_view gzip;  // Content-Encoding: gzip form; empty when it would not be smaller
};

// Every embedded file, sorted by path; static storage.
std::span<const EmbeddedAsset> EmbeddedAssets();

}  // namespace sundial::server
