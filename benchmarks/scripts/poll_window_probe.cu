// How much of the doorbell ping-pong floor is the completion poll's phase, and what reads
// in flight take off it (session 38). Stand-alone, independent of gpuwrite, in the shape
// of ../shared/probes/pingpong.cu.
//
// The floor's GPU side polls the host's answer with one ld.acquire.sys at a time: each
// poll is a PCIe read round trip (about 1.15 us on an H200), so an answer written just
// after a read sampled host memory waits for the next read to get there. `gpuwrite bench`
// shows the floor flat while the host answers up to about 0.8 us late: that much of each
// round trip is spent waiting for a read. Here the GPU keeps W relaxed reads in flight, a
// new one every S ns, so an answer waits at most about S for a read to sample it:
//   acquire W=1        the floor as gpuwrite measures it (one acquire read at a time)
//   relaxed W=1        the same with relaxed reads
//   relaxed W, S, one  W relaxed reads of the one answer word in flight, S ns apart
//   relaxed W, S, lines  the same, read j of a window on its own 128-byte line (the host
//                      writes the answer into every line): reads of one address might be
//                      merged or kept in order by the GPU's memory system; these cannot be
//   ... + acquire      the windowed detection, then one ld.acquire.sys of the answer word:
//                      what a poll that must order later reads after the answer would pay
//   ... + fence        the windowed detection, then fence.acq_rel.sys
//   warps W, S         W warps each polling with one acquire read at a time, warp w
//                      starting w * S after the ping (one word, or a line each)
//   lanes W, S         the same with W lanes of one warp, a line each
//   watched W, S       lane 0 waits on shared memory, lanes 1..W poll the answer word and
//                      the first to see it hands it over (a CQ wait with watcher lanes);
//                      iteration_p50_us: the whole round, until every watcher's read is back;
//                      "open after ping": lane 0 opens the round after its ping, as
//                      gpuwrite's wait opened its watch after the doorbell (session 39)
// Each variant runs N round trips, in R rounds in rotating order; p10 / p50 / p90 per
// round, the first tenth of each run dropped.
//
// Build and run on a GPU machine:
//   nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/poll_window_probe poll_window_probe.cu -lpthread
//   /tmp/poll_window_probe [rounds] [iters] [1: the floor's poll, the warp and lane variants;
//                                            2: the floor's poll and the watched variants]
// (prints one JSON object per run)
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <atomic>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ unsigned ld_acq(const unsigned* p) { unsigned v; asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ unsigned ld_rlx(const unsigned* p) { unsigned v; asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void st_rel(unsigned* p, unsigned v) { asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ uint64_t gtime() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ void spin_until(uint64_t t) { while (gtime() < t) {} }

enum { LINE_WORDS = 32, MAX_W = 8 };

// One thread: ping i, then poll for the answer i. W relaxed reads in flight, one issued
// every `spacing` ns; read j of the window at pong + (LINES ? j * LINE_WORDS : 0). After
// the detection, AFTER 0: nothing, 1: one ld.acquire.sys of the word, 2: fence.acq_rel.sys.
template <int W, bool ACQ, bool LINES, int AFTER>
__global__ void ping(unsigned* ping_w, unsigned* pong, int iters, uint64_t* out, uint64_t spacing) {
  for (int i = 1; i <= iters; i++) {
    uint64_t t0 = gtime();
    st_rel(ping_w, i);
    if (W == 1) {
      if (ACQ) { while (ld_acq(pong) != (unsigned)i) {} }
      else { while (ld_rlx(pong) != (unsigned)i) {} }
    } else {
      unsigned v[W];
      uint64_t next = gtime();
#pragma unroll
      for (int j = 0; j < W; j++) {
        spin_until(next);
        v[j] = ld_rlx(pong + (LINES ? j * LINE_WORDS : 0));
        next = gtime() + spacing;
      }
      bool done = false;
      while (!done) {
#pragma unroll
        for (int j = 0; j < W; j++) {
          if (!done) {
            if (v[j] == (unsigned)i) {
              done = true;
            } else {
              spin_until(next);
              v[j] = ld_rlx(pong + (LINES ? j * LINE_WORDS : 0));
              next = gtime() + spacing;
            }
          }
        }
      }
      if (AFTER == 1) { while (ld_acq(pong) != (unsigned)i) {} }
      if (AFTER == 2) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
    }
    out[i - 1] = gtime() - t0;
  }
}

// W readers poll at once, each with one ld.acquire.sys at a time: with LANES lanes 0..W-1 of
// one warp (a 32-thread block has no other warp to poll with; a warp's lanes issue
// together unless they diverge), else lane 0 of warps 0..W-1. Reader r reads
// pong + (LINES ? r * LINE_WORDS : 0), its first read `r * spacing` ns after the ping; the
// first to see the answer stamps the round trip and tells the others through shared
// memory. Thread 0 pings.
template <int W, bool LINES, bool LANES>
__global__ void ping_readers(unsigned* ping_w, unsigned* pong, int iters, uint64_t* out, uint64_t spacing) {
  __shared__ volatile unsigned seen;
  __shared__ volatile uint64_t t0s;
  int r = LANES ? threadIdx.x : threadIdx.x / 32;
  bool reader = LANES ? r < W : threadIdx.x % 32 == 0;
  for (int i = 1; i <= iters; i++) {
    if (threadIdx.x == 0) {
      seen = 0;
      t0s = gtime();
    }
    __syncthreads();
    uint64_t t0 = t0s;
    if (threadIdx.x == 0)
      st_rel(ping_w, i);
    if (reader) {
      spin_until(t0 + r * spacing);
      const unsigned* p = pong + (LINES ? r * LINE_WORDS : 0);
      while (seen != (unsigned)i) {
        if (ld_acq(p) == (unsigned)i) {
          if (atomicCAS((unsigned*)&seen, 0u, (unsigned)i) == 0u)
            out[i - 1] = gtime() - t0;
          break;
        }
      }
    }
    __syncthreads();
  }
}

// Lane 0 pings and waits on shared memory; lanes 1..W poll the one answer word, lane r
// from (r - 1) * spacing after the ping, and the first to see the answer hands it to lane 0
// through shared memory (fence.cta, then the store): the wait a CQ poll with watcher lanes
// makes (session 39). PAUSE: ns lane 0 sleeps between its looks at shared memory. out holds
// lane 0's round trips; out2 the whole iteration (until every watcher's read is back).
// AFTER 1: lane 0 opens the round after its ping (fence.cta, then the round's word), as
// gpuwrite's wait opens its watch after the doorbell; 2: the same with a relaxed 8-byte
// store to another host word (the doorbell register) after the ping; 0: before the ping.
template <int W, int PAUSE, int AFTER = 0>
__global__ void ping_watched(unsigned* ping_w, unsigned* pong, int iters, uint64_t* out, uint64_t spacing) {
  __shared__ volatile unsigned seen;
  __shared__ volatile uint64_t t0s;
  __shared__ volatile int round;
  uint64_t* out2 = out + iters;
  int lane = threadIdx.x;
  if (lane == 0) { seen = 0; round = 0; }
  __syncthreads();
  uint64_t last = gtime();
  for (int i = 1; i <= iters; i++) {
    if (lane == 0) {
      uint64_t t0 = gtime();
      t0s = t0;
      if (AFTER == 0) {
        __threadfence_block();
        round = i;
        st_rel(ping_w, i);
      } else {
        st_rel(ping_w, i);
        if (AFTER == 2)
          asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(ping_w + 8), "l"((uint64_t)i) : "memory");
        __threadfence_block();
        round = i;
      }
      while (seen != (unsigned)i) { if (PAUSE) __nanosleep(PAUSE); }
      __threadfence_block();
      out[i - 1] = gtime() - t0;
    } else if (lane <= W) {
      while (round != i) {}   // lane 0 has stamped this round's start
      __threadfence_block();
      uint64_t t0 = t0s;
      spin_until(t0 + (lane - 1) * spacing);
      while (seen != (unsigned)i) {
        if (ld_acq(pong) == (unsigned)i) {
          __threadfence_block();
          seen = i;
          break;
        }
      }
    }
    __syncthreads();
    uint64_t now = gtime();
    if (lane == 0) out2[i - 1] = now - last;
    last = now;
  }
}

typedef void (*kernel_t)(unsigned*, unsigned*, int, uint64_t*, uint64_t);
struct variant { const char* name; kernel_t k; uint64_t spacing; int lines; int warps = 1; };

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  int N = argc > 2 ? atoi(argv[2]) : 5000;
  unsigned* h;
  CK(cudaHostAlloc(&h, 64 * 1024, cudaHostAllocMapped));
  unsigned* ping_w = h;
  unsigned* pong = h + 1024;
  uint64_t* d_out;
  CK(cudaMalloc(&d_out, 2 * N * 8));
  CK(cudaMemset(d_out, 0, 2 * N * 8));
  std::vector<variant> vs = {
    {"acquire W=1", ping<1, true, false, 0>, 0, 1},
    {"relaxed W=1", ping<1, false, false, 0>, 0, 1},
    {"relaxed W=2 S=500 one", ping<2, false, false, 0>, 500, 1},
    {"relaxed W=4 S=250 one", ping<4, false, false, 0>, 250, 1},
    {"relaxed W=4 S=250 lines", ping<4, false, true, 0>, 250, 4},
    {"relaxed W=8 S=125 one", ping<8, false, false, 0>, 125, 1},
    {"relaxed W=8 S=125 lines", ping<8, false, true, 0>, 125, 8},
    {"relaxed W=8 S=60 lines", ping<8, false, true, 0>, 60, 8},
    {"relaxed W=8 S=125 lines + acquire", ping<8, false, true, 1>, 125, 8},
    {"relaxed W=8 S=125 lines + fence", ping<8, false, true, 2>, 125, 8},
    {"warps W=1", ping_readers<1, false, false>, 0, 1, 1},
    {"warps W=2 S=575 one", ping_readers<2, false, false>, 575, 1, 2},
    {"warps W=2 S=575 lines", ping_readers<2, true, false>, 575, 2, 2},
    {"warps W=4 S=290 one", ping_readers<4, false, false>, 290, 1, 4},
    {"warps W=4 S=290 lines", ping_readers<4, true, false>, 290, 4, 4},
    {"warps W=8 S=145 lines", ping_readers<8, true, false>, 145, 8, 8},
    {"lanes W=4 S=290 lines", ping_readers<4, true, true>, 290, 4, 1},
    {"lanes W=8 S=145 lines", ping_readers<8, true, true>, 145, 8, 1},
    {"warps W=8 S=145 one", ping_readers<8, false, false>, 145, 1, 8},
    {"lanes W=4 S=290 one", ping_readers<4, false, true>, 290, 1, 1},
    {"lanes W=8 S=145 one", ping_readers<8, false, true>, 145, 1, 1},
    {"watched W=4 S=290", ping_watched<4, 0>, 290, 1, 1},
    {"watched W=4 S=290 pause 32", ping_watched<4, 32>, 290, 1, 1},
    {"watched W=3 S=385", ping_watched<3, 0>, 385, 1, 1},
    {"watched W=2 S=575", ping_watched<2, 0>, 575, 1, 1},
    {"watched W=3 S=385 open after ping", ping_watched<3, 32, 1>, 385, 1, 1},
    {"watched W=3 S=385 open after ping and doorbell", ping_watched<3, 32, 2>, 385, 1, 1},
    {"watched W=3 S=385 pause 32", ping_watched<3, 32>, 385, 1, 1},
  };
  bool watched = argc > 3 && atoi(argv[3]) == 2;   // the floor's poll and the watched waits
  if (watched) {
    std::vector<variant> some = {vs[0], vs[vs.size() - 9]};   // the floor's, lanes W=4 one
    some.insert(some.end(), vs.end() - 7, vs.end());
    vs = some;
  }
  if (argc > 3 && atoi(argv[3]) == 1) {   // the floor's poll, then the warp and lane variants
    std::vector<variant> some = {vs[0]};
    some.insert(some.end(), vs.end() - 18, vs.end() - 7);
    vs = some;
  }
  for (int r = 0; r < rounds; r++) {
    for (size_t q = 0; q < vs.size(); q++) {
      const variant& v = vs[(q + r) % vs.size()];
      for (int k = 0; k < 16 * 1024; k++) h[k] = 0;
      CK(cudaMemset(d_out, 0, 2 * N * 8));
      std::atomic<bool> stop{false};
      int lines = v.lines;
      std::thread t([&] {
        auto* pi = reinterpret_cast<std::atomic<unsigned>*>(ping_w);
        unsigned last = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          unsigned x = pi->load(std::memory_order_acquire);
          if (x != last) {
            last = x;
            for (int j = 0; j < lines; j++)
              reinterpret_cast<std::atomic<unsigned>*>(pong + j * LINE_WORDS)->store(x, std::memory_order_release);
          }
        }
      });
      v.k<<<1, 32 * v.warps>>>(ping_w, pong, N, d_out, v.spacing);
      CK(cudaDeviceSynchronize());
      stop = true;
      t.join();
      std::vector<uint64_t> o(2 * N);
      CK(cudaMemcpy(o.data(), d_out, 2 * N * 8, cudaMemcpyDeviceToHost));
      std::vector<uint64_t> w(o.begin() + N / 10, o.begin() + N);
      std::sort(w.begin(), w.end());
      std::vector<uint64_t> it(o.begin() + N + N / 10, o.end());
      std::sort(it.begin(), it.end());
      printf("{\"round\": %d, \"variant\": \"%s\", \"p10_us\": %.3f, \"p50_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, \"iteration_p50_us\": %.3f}\n",
             r, v.name, w[w.size() / 10] / 1e3, w[w.size() / 2] / 1e3, w[w.size() * 9 / 10] / 1e3,
             w[w.size() * 99 / 100] / 1e3, it[it.size() / 2] / 1e3);
      fflush(stdout);
    }
  }
  return 0;
}
