// The fuzz targets outside the libFuzzer build: runs the named target's
// entry point once on every file under the directories (or files) named on
// the command line, so the seed corpus and every crash reproducer are
// replayed by the ordinary test suite, under gcc and under the ASan and
// TSan builds alike. One binary holds every target (replay_targets.h).
//
//   fuzz_replay TARGET DIR_OR_FILE...
//
// Fails when an argument does not exist or when no input was found at all:
// a replay test that runs nothing would pass without testing anything.
// Files whose names start with '.' (a directory's .gitkeep) are skipped.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "tests/fuzz/replay_targets.h"

namespace {

namespace fs = std::filesystem;

bool Hidden(const fs::path& p) {
  return p.filename().string().rfind('.', 0) == 0;
}

// Appends the inputs `arg` names, sorted so a failure is reproducible.
bool Collect(const fs::path& arg, std::vector<fs::path>* out) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) {
    out->push_back(arg);
    return true;
  }
  if (!fs::is_directory(arg, ec)) {
    std::fprintf(stderr, "replay: %s is neither a file nor a directory\n",
                 arg.c_str());
    return false;
  }
  std::vector<fs::path> found;
  for (const fs::directory_entry& e :
       fs::recursive_directory_iterator(arg, ec)) {
    if (e.is_regular_file() && !Hidden(e.path())) found.push_back(e.path());
  }
  if (ec) {
    std::fprintf(stderr, "replay: cannot list %s: %s\n", arg.c_str(),
                 ec.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  out->insert(out->end(), found.begin(), found.end());
  return true;
}

bool ReadFile(const fs::path& p, std::vector<char>* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  return !in.bad();
}

const ramferry::fuzz::ReplayTarget* FindTarget(const std::string& name) {
  for (const ramferry::fuzz::ReplayTarget& t :
       ramferry::fuzz::ReplayTargets()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  const ramferry::fuzz::ReplayTarget* target = FindTarget(argv[1]);
  if (target == nullptr) {
    std::string names;
    for (const ramferry::fuzz::ReplayTarget& t :
         ramferry::fuzz::ReplayTargets()) {
      names += std::string(names.empty() ? "" : " ") + t.name;
    }
    std::fprintf(stderr, "replay: no target '%s'; targets: %s\n", argv[1],
                 names.c_str());
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    if (!Collect(argv[i], &inputs)) return 1;
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found; the corpus is missing\n");
    return 1;
  }
  std::vector<char> bytes;
  for (const fs::path& p : inputs) {
    if (!ReadFile(p, &bytes)) {
      std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
      return 1;
    }
    // An exact-size heap copy, so ASan sees a read one byte past the input
    // (a vector may have spare capacity behind its end).
    std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), copy.get());
    // Named before the call: if the target aborts, the log says which file.
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
    target->run(copy.get(), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs passed\n", inputs.size());
  return 0;
}
