/* Not part of hcomm's API (shared/API.md) and not installed: the hook
 * through which the Python binding lets Ctrl-C end a blocking call
 * (core/base/interrupt.h). libhcomm_c.so exports it for that binding alone.
 *
 * `check` (NULL: none) runs on a thread that has waited inside a call for
 * 100 ms, and again every 100 ms, with no lock of the library held; when it
 * returns nonzero, that call ends as it would at its deadline (TIMEOUT,
 * with a message saying it was interrupted). */
#ifndef HCOMM_C_API_INTERRUPT_HOOK_H_
#define HCOMM_C_API_INTERRUPT_HOOK_H_

#include "hcomm/hcomm.h"

#ifdef __cplusplus
extern "C" {
#endif

HCOMM_API void hcomm_internal_set_interrupt_check(int (*check)(void));

#ifdef __cplusplus
}
#endif

#endif /* HCOMM_C_API_INTERRUPT_HOOK_H_ */
