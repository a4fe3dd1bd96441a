// bench/transport_goodput.cc: goodput of the live transport between two processes
// (real_runtime/transport_goodput.h), for links that exist only between processes (an emulated
// cluster's shaped veth links; scripts/host-cpu-check):
//
//   transport_goodput --listen 7000                              # rank 0: receives, reports
//   transport_goodput --connect 10.77.0.1:7000 --mib 256 --message-kib 4096   # rank 1: pushes
#include <cstdio>
#include <cstdlib>
#include <string>

#include "real_runtime/transport_goodput.h"

int main(int argc, char** argv) {
  poseidon::rt::GoodputOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--listen") o.listen = v;
    else if (k == "--connect") o.connect = v;
    else if (k == "--mib") o.mib = std::atoll(v.c_str());
    else if (k == "--message-kib") o.message_kib = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "usage: transport_goodput --listen PORT | --connect HOST:PORT [--mib N] "
                           "[--message-kib K]\n");
      return 2;
    }
  }
  return poseidon::rt::RunTransportGoodput(o);
}
