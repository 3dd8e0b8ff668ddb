// Runs the `sundial` CLI as a process for the tests (tests/client/cli_test.cc against a fake
// server, tests/e2e/cli_test.cc against sundiald): its exit code, stdout and stderr, and its
// JSON lines parsed with Boost.JSON. The child gets the test's environment without any
// SUNDIAL_* variable, plus the ones a test passes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace sundial::client::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;

  static std::vector<boost::json::object> Objects(const std::string& text) {
    std::vector<boost::json::object> objects;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      boost::json::error_code ec;
      boost::json::value v = boost::json::parse(line, ec);
      if (ec || !v.is_object()) {
        ADD_FAILURE() << "not a JSON object: " << line;
        continue;
      }
      objects.push_back(std::move(v.as_object()));
    }
    return objects;
  }
  std::vector<boost::json::object> OutObjects() const { return Objects(out); }
  std::vector<boost::json::object> ErrObjects() const { return Objects(err); }
  // The one JSON object on stderr (an empty object, and a failure, when there is not one).
  boost::json::object ErrObject() const {
    auto objects = ErrObjects();
    if (objects.size() != 1) {
      ADD_FAILURE() << "expected one JSON line on stderr: " << err;
      return {};
    }
    return objects[0];
  }
};

// A directory under the test temp dir, removed with the object.
class TempFiles {
 public:
  TempFiles() {
    std::string pattern = ::testing::TempDir() + "sundial-cli-test-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
  }
  ~TempFiles() { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Starts `binary args…` with stdin from /dev/null and stdout/stderr into files; its pid, or -1.
inline pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
                   const std::vector<std::string>& env, const std::string& out_path,
                   const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> argv_strings{binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).rfind("SUNDIAL_", 0) != 0) env_strings.emplace_back(*e);
  }
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Runs `binary args…` to its end.
inline CliRun RunProgram(const std::string& binary, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {}) {
  TempFiles files;
  const std::string out_path = files.Path("out"), err_path = files.Path("err");
  CliRun run;
  const pid_t pid = Spawn(binary, args, env, out_path, err_path);
  if (pid < 0) {
    ADD_FAILURE() << "cannot run " << binary;
    return run;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadAll(out_path);
  run.err = ReadAll(err_path);
  return run;
}

// A program left running (e.g. `sundial watch`), stopped with the object.
class BackgroundProgram {
 public:
  BackgroundProgram(const std::string& binary, const std::vector<std::string>& args,
                    const std::vector<std::string>& env = {}) {
    pid_ = Spawn(binary, args, env, files_.Path("out"), files_.Path("err"));
  }
  ~BackgroundProgram() { Stop(); }

  bool started() const { return pid_ > 0; }
  std::string out() const { return ReadAll(files_.Path("out")); }
  std::string err() const { return ReadAll(files_.Path("err")); }
  // SIGTERM and reap; the exit status (as waitpid reports it), or -1.
  int Stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  // Waits (bounded) for the program to exit on its own; its exit code, or -1.
  int WaitExit(int timeout_ms) {
    for (int waited = 0; pid_ > 0 && waited < timeout_ms; waited += 5) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      ::usleep(5000);  // polling a child's exit, bounded
    }
    return -1;
  }

 private:
  TempFiles files_;
  pid_t pid_ = -1;
};

}  // namespace sundial::client::testing
