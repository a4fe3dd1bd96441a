// validation/draw.h: `poseidon validate --draw N --seed S FILE`, a held-out set of
// configurations drawn at random from the space a user can write.
//
// Held out means held out: a configuration the simulator's settings were chosen by looking at
// cannot report its accuracy. So the set that reports is drawn afterwards, from a seed, by a rule
// nobody tuned: every configuration picks, independently and uniformly unless noted,
//   - a model with a CPU profile (scenarios/profiles/*_cpu_b*.yaml: the model and its batch);
//   - 2 to 8 workers; 1 to W shards, co-located or on machines of their own;
//   - a scheme: ps, sfb, allreduce, auto or paper (all-reduce only under BSP);
//   - BSP (1/2), SSP with staleness 1 to 3 (1/3) or ASP (1/6);
//   - the gate (all, per_layer), DWBP (on 4/5), a priority window (none 1/2, 64 or 256 KiB);
//   - a straggler (1/4: one worker 1.2x to 2.0x slower) and jitter (1/4: lognormal, cv 0.05 to
//     0.2);
//   - the emulated network: 1 Gbit/s or 100 Mbit/s;
// and, with a bound (--max-processes-per-core), again until 1 + workers + shards is within it.
// The result is a sweep file (one `variant` per configuration) that `poseidon validate FILE
// --repeat 3` runs. The same N and seed always give the same bytes; every configuration is
// checked to load and to run live before the file is written.
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::validation {

// What the host can emulate faithfully (docs/validation.md, "Faithful runs"): at most
// `max_processes_per_core` processes of a job (a coordinator, its workers and its shards, each
// a process) per core of `cores`; 0: no bound. A configuration beyond it is drawn again (from the
// same generator, so the same seed, bound and cores give the same file), and the file says so.
struct DrawBound {
  double max_processes_per_core = 0;
  int cores = 0;
  int MaxProcesses() const;  // 0 when unbounded
};

// The sweep's YAML text. `profiles_dir`: where the CPU profiles are; `base`: the base scenario
// as the file should name it (relative to the file's folder). A bound below the smallest
// configuration's 4 processes is a ConfigError.
std::string DrawConfigurations(int count, uint64_t seed, const std::string& profiles_dir,
                               const std::string& base, const DrawBound& bound = {});

// Draws, writes `out` (its folder is created), checks that every configuration loads and can
// run live (a ConfigError naming the configuration otherwise) and says how to run it. Returns 0.
int RunDraw(int count, uint64_t seed, const std::string& out, const std::string& data_dir,
            const DrawBound& bound = {});

}  // namespace poseidon::validation
