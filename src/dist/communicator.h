// Collectives between ranks, over the world or groups split from it: a single-process implementation, and MPI
// when built with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/names.h"

namespace mt {

// Collectives over a group of ranks: the world, or a tensor-, data- or pipeline-parallel group split from it.
// Sums are deterministic: every rank obtains the same bits, and the same inputs give the same bits on every
// run, whatever the MPI library's algorithm choice.
//
// Every sum adds the ranks' contributions in rank order 0, 1, ..., size()-1 in fp32, left to right; bf16 and
// f16 are upcast and rounded to nearest even once at the end. Counts are elements; a negative count, a sum
// over another dtype, or a root outside [0, size()) throws std::invalid_argument. Every rank must make the
// same calls with the same counts, dtypes and roots, from one thread.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" or "mpi"
  // data[count] = sum over ranks of data[count], in place. dtype f32, bf16, f16 or f64.
  virtual void all_reduce_sum(void* data, int64_t count, DType dtype) = 0;
  // recv[count] = sum over ranks r of send_r[rank()*count, (rank()+1)*count): send holds size()*count
  // elements. recv may be send + rank()*count (in place); otherwise the two must not overlap.
  virtual void reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // On root: recv[count] = sum over ranks of send[count]; recv is not touched on the other ranks. recv may be
  // send (in place); otherwise the two must not overlap. ZeRO-2 reduces a block's gradients to the rank
  // that owns each part of it.
  virtual void reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) = 0;
  // recv[size()*count] = the concatenation of every rank's send[count], in rank order. send may alias recv +
  // rank()*count; otherwise the two must not overlap.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual void broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // Point to point with rank `peer` (not this rank): sends send[send_count] to it and receives
  // recv[recv_count] from it, both at once, so that two ranks exchanging never wait for each other. Either
  // side may be left out (null with count 0); the peer must make the matching call.
  virtual void send_recv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                         int peer) = 0;
  virtual void barrier() = 0;
  // Bytes of internal buffers this communicator holds (0 if none), for the memory plan's comm category. Fixed
  // from construction on: no call grows it.
  virtual int64_t buffer_bytes() const = 0;

  // Collective: the ranks that pass the same color (>= 0, else std::invalid_argument) form a new
  // communicator, ranked by key, then by rank() here (as MPI_Comm_split), with the guarantees above and
  // buffers of its own. It may be split again. Every rank gets the communicator of its own color.
  //
  // Not virtual itself, so that AsyncCommunicator::split can return its own type; the implementations
  // override split_into_group.
  std::unique_ptr<Communicator> split(int color, int key);

 protected:
  // split() once the color is checked.
  virtual std::unique_ptr<Communicator> split_into_group(int color, int key) = 0;
};

// One round of a collective moves at most this many bytes between two ranks. A sum holds one round from every
// peer at once, so the receive buffer is (size - 1) * kMpiRoundBytes, allocated once. 4 and 16 MiB were no
// faster on 16 and 64 MiB all-reduces.
constexpr int64_t kMpiRoundBytes = int64_t{1} << 20;

// Bytes of the receive buffer the MPI communicator holds among `world` ranks (none for one rank), known
// without starting MPI, for plans of runs not launched yet.
int64_t mpi_buffer_bytes(int world);

// --dist-backend: "auto" (MPI when launched by mpirun with more than one rank, OMPI_COMM_WORLD_SIZE / PMI
// env, else single), "single" or "mpi".
enum class DistBackend { automatic, single, mpi };
inline constexpr auto kDistBackendNames = names_in_order<DistBackend>("auto", "single", "mpi");

// A usage error naming --dist-backend for a name not in kDistBackendNames.
DistBackend parse_dist_backend(const std::string& name);

// A usage error (mt::fail_usage, core/error.h) names --dist-backend for "mpi" when the binary was built
// without MPI, or for "auto" under a multi-rank launch without MPI (the ranks would otherwise train
// independently, unaware of each other).
//
// The MPI communicator initialises MPI when made and finalises it in its destructor, so a process makes at
// most one; the groups split from it free their MPI_Comm instead. A destructor that runs while an exception
// unwinds skips MPI_Finalize (which waits for every rank) and MPI_Comm_free (collective): the process then
// exits without finalising, and mpirun ends the whole job instead of leaving the other ranks blocked in a
// collective.
//
// A rank of an MPI communicator that waits longer than `timeout_seconds` (> 0; 0: no limit) for another rank
// in any exchange (a collective, a point-to-point exchange, a barrier, a split) ends the job: it prints one
// line naming the exchange, itself and its host, and the world ranks it waited for, then calls MPI_Abort
// (exit code 1). A lost host or link then ends the job instead of hanging every rank.
std::unique_ptr<Communicator> make_communicator(DistBackend backend, double timeout_seconds = 0);

}  // namespace mt
