// Certificates made at test time with the openssl CLI (Debian's `openssl`, scripts/deps.sh):
// a CA, server certificates it signs (for 127.0.0.1 and localhost, another host, expired), and
// a second CA that signs nothing the server shows. EC P-256 keys: quick to make.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace sundial::e2e {

class TestPki {
 public:
  // Files go in `dir` (which must exist).
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA: DIR/NAME.pem and DIR/NAME.key. False when openssl failed.
  bool MakeCa(const std::string& name) {
    return Run(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        " -keyout " +
        Path(name + ".key") + " -out " + Path(name + ".pem") + " -days 2 -subj '/CN=" + name +
        "'"
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign");
  }

  // A server certificate DIR/NAME.pem + DIR/NAME.key with common name `name`, signed by `ca`,
  // naming `alt_names` (subjectAltName syntax), valid for `days` (negative: already expired).
  bool MakeServer(const std::string& name, const std::string& ca,
                  const std::string& alt_names = "DNS:localhost,IP:127.0.0.1", int days = 2) {
    {
      std::ofstream ext(Path(name + ".ext"));
      ext << "subjectAltName=" << alt_names << "\nbasicConstraints=CA:FALSE\n"
          << "extendedKeyUsage=serverAuth\n";
    }
    return Run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
               " -keyout " +
               Path(name + ".key") + " -out " + Path(name + ".csr") + " -subj '/CN=" + name +
               "'") &&
           Run("openssl x509 -req -in " + Path(name + ".csr") + " -CA " + Path(ca + ".pem") +
               " -CAkey " + Path(ca + ".key") + " -CAcreateserial -out " + Path(name + ".pem") +
               " -days " + std::to_string(days) + " -extfile " + Path(name + ".ext"));
  }

  std::string Path(const std::string& file) const { return dir_ + "/" + file; }
  std::string Cert(const std::string& name) const { return Path(name + ".pem"); }
  std::string Key(const std::string& name) const { return Path(name + ".key"); }

 private:
  static bool Run(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string dir_;
};

}  // namespace sundial::e2e
