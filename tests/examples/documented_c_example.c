/* docs/c-api.md's C example ("Embedding from C") as the body of a function
 * with the variables its text assumes as parameters. Compiled as C11 with
 * -pedantic -Werror, never run (its source dials 10.0.0.2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ramferry/ramferry.h"

void docs_c_example(void* base, uint64_t length);

void docs_c_example(void* base, uint64_t length) {
#include "readme_c_example.inc"
}
