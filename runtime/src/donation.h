/* Donated PJRT handles destroyed once their execution finished (donation.c).
 *
 * Ownership: tpu_donation_create returns an owned reference (or NULL, when no
 * event can be made: handles are then destroyed at once); retain/release count
 * references and release accepts NULL. tpu_donation_bury takes the handle and
 * one reference to its donation. */
#ifndef TORCHTPU_DONATION_H_
#define TORCHTPU_DONATION_H_

#include "pjrt/pjrt.h"

typedef struct tpu_donation tpu_donation_t;

/* When the execution whose output is `fed` (borrowed) has finished. */
tpu_donation_t* tpu_donation_create(PJRT_Buffer* fed);
tpu_donation_t* tpu_donation_retain(tpu_donation_t* donation);
void tpu_donation_release(tpu_donation_t* donation);
/* Destroys the donated handle `pjrt` now if its execution finished, else later. */
void tpu_donation_bury(PJRT_Buffer* pjrt, tpu_donation_t* donation);
/* Destroys the buried handles whose execution finished. */
void tpu_donation_drain(void);

#endif /* TORCHTPU_DONATION_H_ */
