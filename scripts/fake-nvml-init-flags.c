/*
 * Added to tests/fixtures/fake_nvml.c by scripts/compare-peers.py, so that
 * nvitop (through pynvml) can start on the fake: pynvml initialises with
 * nvmlInitWithFlags, which vramtop does not call and the fake leaves out.
 * Entry points the fake lacks beyond this one, nvitop shows as N/A.
 */
typedef int nvmlReturn_t;
nvmlReturn_t nvmlInit_v2(void);

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}
