// simpler — session authentication for remote links: a challenge-response over a shared token.
//
// Both sides prove they hold the token without sending it: the client sends a random nonce, the
// server answers with its own nonce and HMAC-SHA256(token, "simpler server" | session | client
// nonce | server nonce), the client checks that and answers with HMAC-SHA256(token, "simpler
// client" | session | server nonce | client nonce). The nonces make every session's proofs new,
// so a recorded exchange cannot be replayed. OpenSSL libcrypto does the hashing and randomness.
#pragma once

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdint>
#include <string_view>

#include "simpler/error.hpp"
#include "simpler/remote/wire.hpp"

namespace simpler::wire {

/// A nonce from OpenSSL's CSPRNG; throws TransportError if it has no entropy.
inline Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    throw TransportError("remote link: OpenSSL RAND_bytes failed (no entropy for a nonce)");
  }
  return n;
}

/// A random non-zero 64-bit session id.
inline std::uint64_t random_session_id() {
  for (;;) {
    const Nonce n = random_nonce();
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(n[i]) << (8 * i);
    if (v != 0) return v;
  }
}

/// HMAC-SHA256(token, role | session (LE) | first | second).
inline Proof session_proof(std::string_view token, std::string_view role, std::uint64_t session,
                           const Nonce& first, const Nonce& second) {
  unsigned char msg[64 + 8 + 2 * kNonceBytes];
  std::size_t len = 0;
  for (char c : role.substr(0, 64)) msg[len++] = static_cast<unsigned char>(c);
  for (int i = 0; i < 8; ++i) msg[len++] = static_cast<unsigned char>(session >> (8 * i));
  for (std::byte b : first) msg[len++] = static_cast<unsigned char>(b);
  for (std::byte b : second) msg[len++] = static_cast<unsigned char>(b);
  Proof out{};
  unsigned int out_len = 0;
  // An empty token is a valid (zero-length) key: loopback sessions without a token still run the
  // exchange, which checks both sides speak the protocol.
  static const unsigned char kEmpty = 0;
  const unsigned char* key =
      token.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), msg, len,
           reinterpret_cast<unsigned char*>(out.data()), &out_len) == nullptr ||
      out_len != out.size()) {
    throw TransportError("remote link: OpenSSL HMAC-SHA256 failed");
  }
  return out;
}

/// Compares two proofs in constant time.
inline bool proofs_equal(const Proof& a, const Proof& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

inline constexpr std::string_view kServerRole = "simpler server";
inline constexpr std::string_view kClientRole = "simpler client";

}  // namespace simpler::wire
