// real_runtime/tls_files.h: a job's TLS identity as PEM files, for TransportOptions.tls.
//
// Like the job's secret, one identity is shared by every process of a job: a self-signed
// certificate (its own CA) and its private key. Each process uses tls_cert = cert.pem,
// tls_key = key.pem and tls_ca = ca.pem if the folder has one (an organisation's own CA),
// else cert.pem. Peers are identified by the HMAC handshake that runs inside TLS; TLS adds
// encryption and integrity for every frame after it (docs/errors.md, "Security bindings").
//
//   rt::WriteJobTlsFiles("job-tls", {});     // poseidon tls-init job-tls
//   o.transport.tls = true;                  // poseidon node ... --tls-dir job-tls
//   const rt::TlsFiles f = rt::JobTlsFiles("job-tls");
//   o.transport.tls_cert = f.cert; o.transport.tls_key = f.key; o.transport.tls_ca = f.ca;
#pragma once

#include <string>

namespace poseidon::rt {

struct TlsFiles {
  std::string cert, key, ca;  // PEM file paths
};

struct TlsIdentityOptions {
  std::string common_name = "poseidon-job";
  int days = 365;          // validity, from one minute ago
  bool overwrite = false;  // replace existing files (otherwise refuse)
};

// Writes DIR/cert.pem (0644) and DIR/key.pem (0600: created owner-only, never readable by
// others even for a moment): an EC P-256 key and a self-signed CA certificate for it. Creates
// DIR. Throws std::runtime_error naming the file and what to do on any failure, and when a file
// exists and !overwrite.
TlsFiles WriteJobTlsFiles(const std::string& dir, const TlsIdentityOptions& options);

// The files a process uses from DIR (ca.pem if present, else cert.pem as the CA). Throws
// std::runtime_error when cert.pem or key.pem is missing, saying how to create them, and when
// key.pem is readable by group or others, saying how to fix it.
TlsFiles JobTlsFiles(const std::string& dir);

}  // namespace poseidon::rt
