// libFuzzer target: the membership gossip a heartbeat carries
// (src/ic/membership/membership.hpp) from arbitrary bytes. Byte 0 picks the configured
// nodes (1 to 64 of them); the rest is decoded. What decodes must encode back
// to exactly the same bytes and a view's binding must match its instances;
// what does not must never read past the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ic/membership/membership.hpp"

using namespace pgrac::ic;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const int nodes = 1 + data[0] % 64;
    const NodeMask configured = nodes == 64 ? ~NodeMask{0} : (NodeMask{1} << nodes) - 1;
    // A copy of exactly the gossip: reading beyond it is an ASan report.
    std::vector<uint8_t> in(data + 1, data + size);
    Gossip g;
    if (!decode_gossip(in.data(), in.size(), configured, &g)) return 0;
    if ((g.committed.members | g.accepted.members | g.proposal.members) & ~configured)
        std::abort();  // a node that is not configured got through
    if (g.proposal.binding != view_binding(g.proposal.members, g.proposal_instances)) std::abort();
    if (gossip_size(g) != in.size()) std::abort();
    std::vector<uint8_t> out(gossip_size(g));
    encode_gossip(g, out.data());
    if (out != in) std::abort();  // one layout, no slack
    return 0;
}
