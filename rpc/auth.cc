#include "rpc/auth.h"

#include <sodium.h>

#include <cstdint>
#include <mutex>

#include "base/status.h"

namespace loom::rpc {
namespace {

void InitSodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) throw StatusError(Internal("libsodium failed to initialize"));
  });
}

}  // namespace

std::string NewNonce() {
  InitSodium();
  std::string nonce(kNonceBytes, '\0');
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

std::string Proof(const std::string& secret, const char* role, const std::string& nonce,
                  int trainer_id) {
  InitSodium();
  unsigned char key[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(key, reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  std::string msg = StrCat(role, "|", nonce, "|", trainer_id);
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, sizeof(key));
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(msg.data()),
                                msg.size());
  crypto_auth_hmacsha256_final(&st, mac);
  sodium_memzero(key, sizeof(key));
  return std::string(reinterpret_cast<const char*>(mac), sizeof(mac));
}

bool ProofMatches(const std::string& got, const std::string& expected) {
  return got.size() == expected.size() &&
         sodium_memcmp(got.data(), expected.data(), got.size()) == 0;
}

}  // namespace loom::rpc
