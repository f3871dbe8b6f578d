/* test_nccl_open.c - NCCL is opened at the first collective on GPU buffers,
 * not linked (distributed/dist_nccl.c): a program built with it has no
 * libnccl in the process at start, so it starts where NCCL is missing; and
 * where the build found NCCL's header, its library opens with every call
 * the build makes, GPU or none.  (The emulator build links its own NCCL:
 * there the check is that every call is taken.) */
#include "check.h"
#include "../distributed/dist.h"

#include <stdio.h>
#include <string.h>

static bool mapped(const char *lib) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[1024];
    bool found = false;
    while (maps && fgets(line, sizeof line, maps)) found |= strstr(line, lib) != NULL;
    if (maps) fclose(maps);
    return found;
}

int main(void) {
    CHECK(!mapped("libnccl"), "libnccl is in the process before any collective");
    char why[512] = "";
    bool opens = ag__dist_nccl_loadable(why, sizeof why);
    CHECK(opens, "NCCL: %s", why);
#ifndef AG_NCCL_EMULATED
    CHECK(!opens || mapped("libnccl"), "NCCL opened, yet no libnccl in the process");
#endif
    CHECK(ag__dist_nccl_loadable(why, sizeof why) == opens, "a second ask answers alike");
    return check_summary("nccl_open");
}
