// The exhaustive check behind the AVX-512 int8 quantizer (backend/cpu/block_codec.h): for every fp32
// quotient q in [-1, 1] (and a little beyond), both maps, the vector code of q either is flagged (left to
// exact_code) or equals the exact code of every quotient within kSearchUlps fp32 steps of q: the exact
// quotient of an element is within that distance of the product the vector code sees, so an unflagged code
// is exact_code's. The scale is 1 here (q is the element); the test at other scales is tests/unit's
// KernelMomentQuant.BytesAreTheDefinitionsNearEveryEdgeAndAtAnyScale. About a minute per map and sign on
// one core; prints the flagged share and the mismatches (0 expected), exit code 1 on any.
//   check_moment_codes [signed|unsigned|all]
#include <cstdio>
#include <cstring>

#include "backend/cpu/block_codec.h"

#ifdef MT_MOMENT_CODEC_AVX512
namespace {

using namespace mt;
using namespace mt::kernels;
using namespace mt::kernels::MT_ISA;

// Codes of the 16 quotients from bits first | sign on; returns the mismatches.
template <MomentCodec kCodec>
int64_t check(uint32_t sign, int64_t& flagged, int64_t& total) {
  const DynamicMapSearch& search = dynamic_map_of(kCodec).search;
  const uint32_t top = std::bit_cast<uint32_t>(1.0f) + 64;
  const auto exact = [](uint32_t bits) { return exact_code(kCodec, std::bit_cast<float>(bits), 1.0f); };
  int64_t bad = 0, doubts = 0, count = 0;
#pragma omp parallel for reduction(+ : bad, doubts, count) schedule(dynamic, 4096)
  for (int64_t first = 0; first <= top; first += 16) {
    alignas(64) uint32_t bits[16];
    for (int l = 0; l < 16; ++l) bits[l] = static_cast<uint32_t>(first + l) | sign;
    const __m512 q = _mm512_castsi512_ps(_mm512_load_si512(bits));
    // The element is q itself: non-zero exactly where q is (an underflowed product is another case, flagged
    // by construction).
    const VectorCodes v = dynamic_codes<kCodec>(search, q, first == 0 ? 0xfffe : 0xffff);
    alignas(64) int32_t code[16];
    _mm512_store_si512(code, v.code);
    for (int l = 0; l < 16; ++l) {
      const uint32_t b = static_cast<uint32_t>(first + l);
      ++count;
      if (v.doubt >> l & 1) {
        ++doubts;
        continue;
      }
      const uint32_t low = b == 0            ? 0
                           : b < kSearchUlps ? 0
                                             : b - kSearchUlps,
                     high = b == 0 ? 0 : b + kSearchUlps;
      const int e = exact(b | sign), e_low = exact(low | sign), e_high = exact(high | sign);
      if (code[l] != e || code[l] != e_low || code[l] != e_high) {
#pragma omp critical
        if (bad < 10) std::printf("  %08x: vector %d, exact %d %d %d\n", b | sign, code[l], e_low, e, e_high);
        ++bad;
      }
    }
  }
  flagged += doubts;
  total += count;
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
    std::printf("check_moment_codes: this CPU has no AVX-512 (F, BW, DQ, VL)\n");
    return 2;
  }
  const char* which = argc > 1 ? argv[1] : "all";
  int64_t bad = 0;
  const auto report = [&](const char* map, uint32_t sign, auto check) {
    int64_t flagged = 0, total = 0;
    const int64_t mismatches = check(sign, flagged, total);
    std::printf("%s map, %s quotients: %lld, flagged %lld (%.2e), mismatches %lld\n", map,
                sign ? "negative" : "positive", static_cast<long long>(total),
                static_cast<long long>(flagged), double(flagged) / double(total),
                static_cast<long long>(mismatches));
    bad += mismatches;
  };
  for (uint32_t sign : {0u, 0x80000000u}) {
    if (std::strcmp(which, "unsigned") != 0) report("signed", sign, check<MomentCodec::dynamic_signed>);
    if (std::strcmp(which, "signed") != 0) report("unsigned", sign, check<MomentCodec::dynamic_unsigned>);
  }
  return bad ? 1 : 0;
}
#else
int main() {
  std::printf("check_moment_codes: built without AVX-512 (x86-64 only)\n");
  return 2;
}
#endif
