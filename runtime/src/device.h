/* Internal: the PJRT client, device buffers and executables (src/pjrt/ hides PJRT).
 *
 * tpu_buffer_t is a reference-counted immutable device buffer with the aval of
 * the value that produced it. Buffers from an asynchronous execution may not be
 * ready yet; errors of that execution surface from tpu_buffer_await /
 * tpu_buffer_to_host, prefixed with the producing op's name. */
#ifndef TORCHTPU_SRC_DEVICE_H_
#define TORCHTPU_SRC_DEVICE_H_

#include <stddef.h>

#include "torchtpu/builder.h"
#include "torchtpu/memory.h"
#include "torchtpu/runtime.h"
#include "torchtpu/status.h"

/* Addressable devices one process uses (the client keeps the first ones). */
#define TPU_MAX_DEVICES 256

typedef struct tpu_buffer tpu_buffer_t;
typedef struct tpu_donation tpu_donation_t; /* donation.h */
typedef struct tpu_executable tpu_executable_t;

/* Host data is dense row-major of aval's dtype; copied before returning. */
tpu_status_t* tpu_buffer_from_host(int device, const void* data, const tpu_aval_t* aval,
                                   tpu_buffer_t** out_buffer);
/* Like tpu_buffer_from_host for data in a host pool block (hostpool.h), which
 * it consumes, on failure too. Where the plugin reads host memory (the CPU
 * plugin) the block becomes the buffer's memory, with no copy, and returns to
 * the pool when the buffer is destroyed; elsewhere it is copied and given back. */
tpu_status_t* tpu_buffer_from_block(int device, void* block, const tpu_aval_t* aval,
                                    tpu_buffer_t** out_buffer);
/* Waits for the buffer and copies it into `dst` (exactly the buffer's bytes). */
tpu_status_t* tpu_buffer_to_host(tpu_buffer_t* buf, void* dst, size_t nbytes);
/* Waits until ready; returns the asynchronous error, if any. */
tpu_status_t* tpu_buffer_await(tpu_buffer_t* buf);
/* Calls fn(user) once when the buffer's producing work has finished (failed
 * too), at once when it already has, else on a plugin thread. */
tpu_status_t* tpu_buffer_on_ready(tpu_buffer_t* buf, void (*fn)(void* user), void* user);
tpu_buffer_t* tpu_buffer_retain(tpu_buffer_t* buf);
void tpu_buffer_release(tpu_buffer_t* buf);
const tpu_aval_t* tpu_buffer_aval(const tpu_buffer_t* buf);
int tpu_buffer_device(const tpu_buffer_t* buf);
size_t tpu_buffer_nbytes(const tpu_buffer_t* buf);

/* ---- placeholders: results of a fused program not run yet (fuse.c) ----
 * A placeholder has its aval at once; everything that needs its data (a
 * download, an execution that reads it, a readiness query) runs its device's
 * pending program first through the hooks, so it never needs to know fuse.c. */
typedef struct tpu_pending_hooks {
  /* Runs the pending program of `device` (-1: every device). */
  tpu_status_t* (*flush)(int device);
  /* `buf` (still PENDING) lost its last reference: its program need not keep it. */
  void (*dead)(tpu_buffer_t* buf);
  /* PENDING `buf` took `old`'s place in a storage (an in-place update): the
   * program may give old's buffer to buf's value. */
  void (*replaced)(tpu_buffer_t* old, tpu_buffer_t* buf);
} tpu_pending_hooks_t;
void tpu_buffer_set_pending_hooks(const tpu_pending_hooks_t* hooks);
tpu_status_t* tpu_buffer_flush_pending(int device);
/* A storage's buffer went from `old` to `buf` (either may be NULL): tells the
 * hooks when `buf` is a placeholder. */
void tpu_buffer_note_replaced(tpu_buffer_t* old, tpu_buffer_t* buf);
/* Marks `buf` as a cache's shared value (an uploaded scalar, scalars.c): equal
 * values are one buffer, so its identity means nothing and it is never donated.
 * Call before the buffer is shared. */
void tpu_buffer_intern(tpu_buffer_t* buf);
bool tpu_buffer_interned(const tpu_buffer_t* buf);
/* A PENDING placeholder for value `value` of `device`'s fused queue at `epoch`,
 * made by the queue's `seq`-th recorded op (>= 1). */
tpu_status_t* tpu_buffer_create_pending(int device, const tpu_aval_t* aval, const char* producer, int32_t value,
                                        uint64_t epoch, uint64_t seq, tpu_buffer_t** out_buffer);
/* A placeholder's `seq`, pending or settled; 0 for any other buffer. */
uint64_t tpu_buffer_fuse_seq(const tpu_buffer_t* buf);
bool tpu_buffer_is_pending(const tpu_buffer_t* buf);
/* True when `buf` may be donated to an execution: a real device buffer, not
 * lent host memory (hostpool.h) nor interned, held by exactly `holders` references (the
 * caller's count of those it knows: its storage, the op's snapshot, the launch). */
bool tpu_buffer_donatable(const tpu_buffer_t* buf, int holders);
/* The real buffer behind `buf` (borrowed): `buf` itself, or a settled
 * placeholder's target; NULL while pending or after its program failed. */
tpu_buffer_t* tpu_buffer_settled(tpu_buffer_t* buf);
/* References held to `buf` (a donation check's count). */
int tpu_buffer_refcount(const tpu_buffer_t* buf);
/* args[i] was donated where donate[i] (NULL: none) to the execution that
 * `donation` (borrowed; may be NULL) follows: their bytes now belong to an
 * output (memory accounting moves at once); releasing one only drops the PJRT
 * handle, once that execution finished (donation.h). */
void tpu_buffer_note_donations(int nargs, tpu_buffer_t* const* args, const bool* donate, tpu_donation_t* donation);
/* Why a placeholder's program failed (a new status), or NULL for any other buffer. */
tpu_status_t* tpu_buffer_error(const tpu_buffer_t* buf);
/* True (and its value) when `buf` is PENDING in the queue epoch `epoch`. */
bool tpu_buffer_pending_value(const tpu_buffer_t* buf, uint64_t epoch, int32_t* out_value);
/* The flusher's outcome for a PENDING placeholder: its real buffer (retained),
 * or why its program did not run (copied). Called once, under the queue lock. */
void tpu_buffer_resolve(tpu_buffer_t* buf, tpu_buffer_t* real);
void tpu_buffer_fail(tpu_buffer_t* buf, const tpu_status_t* why);

/* Compiles StableHLO text to run on any of the client's devices (for a client
 * with one device: compiled for it, executable.c says why). `nouts` is checked.
 * The executable keeps its text, so fuse.c can call it from a larger program. */
tpu_status_t* tpu_executable_compile(const char* mlir, size_t len, int nouts,
                                     tpu_executable_t** out_exe);
/* As tpu_executable_compile, but compiles only when first launched or loaded:
 * fused eager mode records an op's program for its text and avals, and inlines
 * it into a larger program, so most op programs never run on their own. */
tpu_status_t* tpu_executable_create_lazy(const char* mlir, size_t len, int nouts, tpu_executable_t** out_exe);
/* Compiles a lazy executable now (no-op once compiled): its compile error, if any. */
tpu_status_t* tpu_executable_load(tpu_executable_t* exe);
/* Starts tpu_executable_load on the background thread (background.h), which
 * holds a reference meanwhile; a launch that comes first waits for it, or
 * compiles itself if it has not started. A failed background compile is
 * dropped: the launch compiles again and reports the error as its own. */
tpu_status_t* tpu_executable_load_async(tpu_executable_t* exe);
/* Executables are reference counted: destroy drops one reference. */
tpu_executable_t* tpu_executable_retain(tpu_executable_t* exe);
void tpu_executable_destroy(tpu_executable_t* exe);
/* Process-unique id (never reused) and the StableHLO text it was compiled from (borrowed). */
uint64_t tpu_executable_id(const tpu_executable_t* exe);
/* A standalone executable is a whole program (a torch.compile graph): fused
 * eager mode launches it as strict mode does instead of recording it. Inlined
 * into the recording around it, it made a new fused program, and a compile of
 * the whole model, whenever that eager code changed (a decode loop's token
 * concatenation grows every step). Set before the executable is shared. */
void tpu_executable_set_standalone(tpu_executable_t* exe);
bool tpu_executable_standalone(const tpu_executable_t* exe);
/* The memory mappings its code added to the process when it was compiled or
 * loaded (what the executable cache weighs it by; 0 while a lazy one is not compiled). */
int tpu_executable_maps(const tpu_executable_t* exe);
/* How many executables were compiled or loaded so far in the process (the cache
 * weighs its lazy entries again when this moved). */
uint64_t tpu_executable_loads(void);
const char* tpu_executable_text(const tpu_executable_t* exe, size_t* out_len);
/* Runs on `device` now; outputs get `out_avals` and remember `producer` (op
 * name, copied) for error messages. In debug eager mode waits for the outputs. */
tpu_status_t* tpu_executable_launch(tpu_executable_t* exe, int device, int nargs, tpu_buffer_t* const* args,
                                    int nouts, const tpu_aval_t* out_avals, const char* producer,
                                    tpu_buffer_t** out_buffers);
/* As tpu_executable_launch, and argument i's buffer may be donated to the
 * output its parameter aliases where donate[i] (NULL: none): the caller has
 * checked that nothing else holds it (tpu_buffer_donatable); after a donation it
 * is noted donated (tpu_buffer_note_donations) and holds no data. */
tpu_status_t* tpu_executable_launch_donating(tpu_executable_t* exe, int device, int nargs,
                                             tpu_buffer_t* const* args, const bool* donate, int nouts,
                                             const tpu_aval_t* out_avals, const char* producer,
                                             tpu_buffer_t** out_buffers);
/* What ops call (fuse.c): tpu_executable_launch, or in fused eager mode the
 * execution recorded into the device's pending program, its outputs placeholders. */
tpu_status_t* tpu_executable_execute(tpu_executable_t* exe, int device, int nargs,
                                     tpu_buffer_t* const* args, int nouts,
                                     const tpu_aval_t* out_avals, const char* producer,
                                     tpu_buffer_t** out_buffers);
/* As tpu_executable_execute, offering `donate` when it launches now (a recorded
 * execution in fused eager mode donates nothing). */
tpu_status_t* tpu_executable_execute_donating(tpu_executable_t* exe, int device, int nargs,
                                              tpu_buffer_t* const* args, const bool* donate, int nouts,
                                              const tpu_aval_t* out_avals, const char* producer,
                                              tpu_buffer_t** out_buffers);

/* Fused eager mode's donation switch (TORCHTPU_FUSED_DONATE), for tests that
 * cover both settings in one process: later flushes follow it. */
void tpu_fuse_set_donation(bool on);

/* INVALID_ARGUMENT naming the device unless 0 <= device < device count. */
tpu_status_t* tpu_runtime_check_device(int device);

/* Records an execution in flight by its first output `buf` so
 * tpu_runtime_synchronize can wait for it (stream.c; bounded list, oldest
 * dropped once ready). `inputs` are the buffers the execution read: when it
 * read the newest entry's buffer it stands for that entry (see stream.c). */
void tpu_runtime_track_inflight(tpu_buffer_t* buf, int ninputs, tpu_buffer_t* const* inputs); /* retains `buf` */
/* How many references to `buf` the in-flight list holds (0 once finished). */
int tpu_runtime_inflight_holds(const tpu_buffer_t* buf);
/* Drops in-flight entries whose work has finished (no wait). */
void tpu_runtime_retire_inflight(void);

/* Device memory accounting (memory.c): a buffer of `nbytes` came or went. */
void tpu_memory_note_alloc(int device, size_t nbytes);
void tpu_memory_note_free(int device, size_t nbytes);
/* Reads or resets (the peaks, or the allocated/freed totals) one device's
 * counters; `device` must be in range. */
void tpu_memory_counters_read(int device, tpu_memory_stats_t* out_stats);
void tpu_memory_counters_reset(int device, bool peak);
/* Live buffers (or their bytes) on all devices: the live_* metrics. */
int64_t tpu_memory_live_total(bool bytes);
#endif
