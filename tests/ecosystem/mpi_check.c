/* Open MPI on uroce (tests/ecosystem): a byte-checked ping-pong of every
 * size from 8 B to 1 MiB between every pair of ranks, an MPI_Allreduce
 * whose result is known, and MPI_Put into a window read back by its owner.
 * Prints "mpi_check: OK" on rank 0 and exits 0 only if every byte matched. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static void fail(const char* what, int peer, size_t n) {
  fprintf(stderr, "mpi_check: rank %d: %s (peer %d, %zu bytes)\n", rank, what, peer, n);
  ++failures;
}

/* Byte i of the message from rank `from` of size n, round r. */
static uint8_t pattern(int from, size_t n, size_t i, int r) { return (uint8_t)(from * 31 + n * 7 + i * 13 + r); }

static void pingpong(int a, int b, uint8_t* buf, size_t max) {
  for (size_t n = 8; n <= max; n *= 2) {
    for (int r = 0; r < 3; ++r) {
      if (rank == a) {
        for (size_t i = 0; i < n; ++i) buf[i] = pattern(a, n, i, r);
        MPI_Send(buf, (int)n, MPI_BYTE, b, r, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, (int)n, MPI_BYTE, b, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; ++i)
          if (buf[i] != pattern(b, n, i, r)) {
            fail("pong differs", b, n);
            break;
          }
      } else if (rank == b) {
        memset(buf, 0, n);
        MPI_Recv(buf, (int)n, MPI_BYTE, a, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; ++i)
          if (buf[i] != pattern(a, n, i, r)) {
            fail("ping differs", a, n);
            break;
          }
        for (size_t i = 0; i < n; ++i) buf[i] = pattern(b, n, i, r);
        MPI_Send(buf, (int)n, MPI_BYTE, a, r, MPI_COMM_WORLD);
      }
    }
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t max = 1 << 20;
  uint8_t* buf = malloc(max);
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b) {
      pingpong(a, b, buf, max);
      MPI_Barrier(MPI_COMM_WORLD);
    }

  /* Allreduce: the sum of (rank + 1) * (i + 1) over ranks, element i. */
  enum { kElems = 4096 };
  int64_t* in = malloc(kElems * sizeof *in);
  int64_t* out = malloc(kElems * sizeof *out);
  for (int i = 0; i < kElems; ++i) in[i] = (int64_t)(rank + 1) * (i + 1);
  MPI_Allreduce(in, out, kElems, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int64_t ranks_sum = (int64_t)size * (size + 1) / 2;
  for (int i = 0; i < kElems; ++i)
    if (out[i] != ranks_sum * (i + 1)) {
      fail("allreduce differs", -1, (size_t)i);
      break;
    }

  /* MPI_Put: every rank writes its block into every other rank's window. */
  enum { kBlock = 65536 };
  uint8_t* win_mem;
  MPI_Win win;
  MPI_Win_allocate((MPI_Aint)kBlock * size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
  memset(win_mem, 0, (size_t)kBlock * size);
  uint8_t* mine = malloc(kBlock);
  for (size_t i = 0; i < kBlock; ++i) mine[i] = pattern(rank, kBlock, i, 9);
  MPI_Win_fence(0, win);
  for (int t = 0; t < size; ++t)
    if (t != rank) MPI_Put(mine, kBlock, MPI_BYTE, t, (MPI_Aint)kBlock * rank, kBlock, MPI_BYTE, win);
  MPI_Win_fence(0, win);
  for (int s = 0; s < size; ++s)
    for (size_t i = 0; s != rank && i < kBlock; ++i)
      if (win_mem[(size_t)kBlock * s + i] != pattern(s, kBlock, i, 9)) {
        fail("put differs", s, i);
        break;
      }
  MPI_Win_free(&win);

  int total = 0;
  MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf(total ? "mpi_check: %d FAILURES\n" : "mpi_check: OK (%d ranks)\n", total ? total : size);
  MPI_Finalize();
  return total ? 1 : 0;
}
