#include "wal/file.h"

namespace sundial::wal {

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string path(dir);
  if (path.back() != '/') path.push_back('/');
  path.append(name);
  return path;
}

std::string DirName(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

Result<std::string> ReadFileToString(FileSystem* fs, const std::string& path) {
  auto file = fs->NewSequentialFile(path);
  if (!file.ok()) return file.status();
  std::string contents;
  std::string scratch(64 << 10, '\0');
  while (true) {
    std::string_view chunk;
    Status s = (*file)->Read(scratch.size(), scratch.data(), &chunk);
    if (!s.ok()) return s;
    contents.append(chunk);
    if (chunk.size() < scratch.size()) break;
  }
  return contents;
}

Status WriteStringToFile(FileSystem* fs, const std::string& path, std::string_view contents) {
  auto file = fs->NewWritableFile(path);
  if (!file.ok()) return file.status();
  Status s = (*file)->Append(contents);
  if (s.ok()) s = (*file)->Sync();
  Status c = (*file)->Close();
  return s.ok() ? c : s;
}

}  // namespace sundial::wal
