#include "real_runtime/tls_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct FileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};

// OpenSSL's last error as text (or "unknown error").
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

[[noreturn]] void Fail(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, OpenSslError()));
}

std::runtime_error Exists(const std::string& path) {
  return std::runtime_error(fmt::format(
      "{}: exists already; keep it, or replace the job's TLS files (tls-init --force)", path));
}

// Opens `path` for writing with `mode`; O_EXCL unless overwrite (then an existing file is first
// removed, so that it is created anew with `mode`).
std::unique_ptr<FILE, FileClose> Create(const std::string& path, mode_t mode, bool overwrite) {
  if (overwrite) ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) throw Exists(path);
    throw std::runtime_error(fmt::format("{}: cannot create: {}", path, std::strerror(err)));
  }
  ::fchmod(fd, mode);  // whatever the umask
  FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  return std::unique_ptr<FILE, FileClose>(f);
}

}  // namespace

TlsFiles WriteJobTlsFiles(const std::string& dir, const TlsIdentityOptions& o) {
  if (o.days < 1) throw std::runtime_error(fmt::format("the validity must be >= 1 day, got {}", o.days));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create the folder: {}", dir, ec.message()));
  const TlsFiles files{dir + "/cert.pem", dir + "/key.pem", dir + "/cert.pem"};
  // Both checked before anything is written, so that a refusal leaves no new key beside an old
  // certificate.
  if (!o.overwrite) {
    for (const std::string& p : {files.cert, files.key}) {
      if (fs::exists(p)) throw Exists(p);
    }
  }
  std::unique_ptr<EVP_PKEY, PkeyFree> key(EVP_EC_gen("P-256"));
  if (!key) Fail("cannot generate an EC P-256 key");
  std::unique_ptr<X509, X509Free> x(X509_new());
  if (!x) Fail("cannot allocate a certificate");
  if (X509_set_version(x.get(), 2) != 1 ||
      ASN1_INTEGER_set(X509_get_serialNumber(x.get()), 1) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(x.get()), -60) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(o.days) * 86400) == nullptr ||
      X509_set_pubkey(x.get(), key.get()) != 1) {
    Fail("cannot fill in the certificate");
  }
  X509_NAME* name = X509_get_subject_name(x.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(o.common_name.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_set_issuer_name(x.get(), name) != 1) {
    Fail(fmt::format("cannot set the certificate's name '{}'", o.common_name));
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x.get(), x.get(), nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
  if (ext == nullptr) Fail("cannot make the certificate a CA");
  const int added = X509_add_ext(x.get(), ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) Fail("cannot make the certificate a CA");
  if (X509_sign(x.get(), key.get(), EVP_sha256()) <= 0) Fail("cannot sign the certificate");
  {
    auto f = Create(files.key, 0600, o.overwrite);
    if (PEM_write_PrivateKey(f.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
        std::fflush(f.get()) != 0) {
      Fail(files.key + ": cannot write the key");
    }
  }
  {
    auto f = Create(files.cert, 0644, o.overwrite);
    if (PEM_write_X509(f.get(), x.get()) != 1 || std::fflush(f.get()) != 0) {
      Fail(files.cert + ": cannot write the certificate");
    }
  }
  return files;
}

TlsFiles JobTlsFiles(const std::string& dir) {
  TlsFiles f{dir + "/cert.pem", dir + "/key.pem", dir + "/ca.pem"};
  for (const std::string& p : {f.cert, f.key}) {
    if (!fs::exists(p)) {
      throw std::runtime_error(fmt::format(
          "{}: no such file; create the job's TLS files with 'poseidon tls-init {}' and copy the "
          "folder to every machine",
          p, dir));
    }
  }
  // The private key is the job's identity, like its secret: owner-only (LoadSecretFile's rule).
  struct stat st {};
  if (::stat(f.key.c_str(), &st) != 0) {
    throw std::runtime_error(fmt::format("{}: cannot read: {}", f.key, std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    throw std::runtime_error(fmt::format(
        "{}: the private key is readable by group or others (mode {:04o}); chmod 600 {}", f.key,
        st.st_mode & 0777, f.key));
  }
  if (!fs::exists(f.ca)) f.ca = f.cert;
  return f;
}

}  // namespace poseidon::rt
