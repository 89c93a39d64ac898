/* The lowering families: one table per file of ops/, each ending with
 * {NULL, NULL}, merged by table.c. Adding a family: define its table in its
 * file, declare it here, list it in table.c. */
#ifndef TORCHTPU_SRC_OPS_FAMILIES_H_
#define TORCHTPU_SRC_OPS_FAMILIES_H_
#include "torchtpu/lowering.h"

extern const tpu_lowering_t tpu_lowerings_creation[];
extern const tpu_lowering_t tpu_lowerings_elementwise[];
extern const tpu_lowering_t tpu_lowerings_reduce[];
/* torch.histogram (histogram.c). */
extern const tpu_lowering_t tpu_lowerings_histogram[];
/* torch.segment_reduce (segment.c). */
extern const tpu_lowering_t tpu_lowerings_segment[];
extern const tpu_lowering_t tpu_lowerings_matmul[];
/* _int_mm, _weight_int8pack_mm, _compute_linear_combination (mm_extra.c). */
extern const tpu_lowering_t tpu_lowerings_mm_extra[];
extern const tpu_lowering_t tpu_lowerings_nn[];
/* The legacy convolution overloads (conv_legacy.c). */
extern const tpu_lowering_t tpu_lowerings_conv_legacy[];
/* Fractional max pooling (fractional_pool.c). */
extern const tpu_lowering_t tpu_lowerings_fractional_pool[];
/* nn.MultiheadAttention / TransformerEncoderLayer fast paths (nn_transformer.c). */
extern const tpu_lowering_t tpu_lowerings_nn_transformer[];
/* FlashAttention's ops (varlen_attn), computed densely (nn_varlen.c). */
extern const tpu_lowering_t tpu_lowerings_nn_varlen[];
/* The multi-class margin losses (nn_margin.c). */
extern const tpu_lowering_t tpu_lowerings_nn_margin[];
/* SyncBatchNorm's kernels and batch_norm_update_stats (nn_batchnorm_stats.c). */
extern const tpu_lowering_t tpu_lowerings_nn_batchnorm_stats[];
extern const tpu_lowering_t tpu_lowerings_index[];
/* torch.unique / unique_consecutive, flat and over a dim (unique.c). */
extern const tpu_lowering_t tpu_lowerings_unique[];
/* Nested (jagged) tensors' dense <-> jagged conversions (jagged.c). */
extern const tpu_lowering_t tpu_lowerings_jagged[];
/* EmbeddingBag (embedding_bag.c). */
extern const tpu_lowering_t tpu_lowerings_embedding_bag[];
extern const tpu_lowering_t tpu_lowerings_shape[];
/* grid_sampler_{2,3}d and backwards (grid_sample.c). */
extern const tpu_lowering_t tpu_lowerings_grid_sample[];
extern const tpu_lowering_t tpu_lowerings_random[];
/* Rejection samplers: _standard_gamma, _sample_dirichlet, poisson (sampling.c). */
extern const tpu_lowering_t tpu_lowerings_sampling[];
extern const tpu_lowering_t tpu_lowerings_amp[];
extern const tpu_lowering_t tpu_lowerings_fft[];
extern const tpu_lowering_t tpu_lowerings_special[];
/* Orthogonal polynomials (polynomial.c), Bessel and Airy functions (bessel.c). */
extern const tpu_lowering_t tpu_lowerings_polynomial[];
extern const tpu_lowering_t tpu_lowerings_bessel[];
extern const tpu_lowering_t tpu_lowerings_linalg[];
extern const tpu_lowering_t tpu_lowerings_lu[];
/* The symmetric indefinite LDL^T factorisation and its solve (ldl.c). */
extern const tpu_lowering_t tpu_lowerings_ldl[];
/* Householder QR (qr.c), symmetric eigendecomposition (eigh.c), SVD (svd.c),
 * matrix functions (matfn.c), pairwise distances (distance.c). */
extern const tpu_lowering_t tpu_lowerings_qr[];
extern const tpu_lowering_t tpu_lowerings_eigh[];
/* General (non-symmetric) eigendecomposition (eig.c). */
extern const tpu_lowering_t tpu_lowerings_eig[];
extern const tpu_lowering_t tpu_lowerings_svd[];
extern const tpu_lowering_t tpu_lowerings_matfn[];
extern const tpu_lowering_t tpu_lowerings_distance[];
extern const tpu_lowering_t tpu_lowerings_misc[];
extern const tpu_lowering_t tpu_lowerings_nn_models[];
extern const tpu_lowering_t tpu_lowerings_optim[];
/* Graph-only families: view ops as values, factories and copies (eager's binding
 * handles these itself, so eager never reaches them). */
extern const tpu_lowering_t tpu_lowerings_views[];
extern const tpu_lowering_t tpu_lowerings_factory[];
/* _foreach_<op> as <op> per element (ops/foreach.c). */
extern const tpu_lowering_t tpu_lowerings_foreach[];
#endif
