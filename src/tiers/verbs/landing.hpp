// Frames by RDMA WRITE (docs/rdma.md, "Frames by RDMA WRITE"). A dialing
// transport may offer the peer a landing area: a few slots of one frame each,
// in memory registered for remote write. The offer travels once, in the
// rdma_cm connect request's private data. The peer then writes a frame straight
// into the next slot with RDMA WRITE WITH IMMEDIATE (the immediate is the
// frame's number) instead of SENDing it into a receive buffer; the completion
// of the consumed receive is the arrival. The reader says how many landed
// frames it has consumed in the immediate of each SEND of its own, which gives
// the writer its slots back. Without a free slot the writer SENDs.
//
// The offer and the credit arithmetic are here, without verbs, so that they
// can be tested anywhere; the transport posts and polls.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgrac::tiers {

inline constexpr size_t kLandingOfferSize = 24;  // fits rdma_cm's 56 bytes of RC private data
inline constexpr uint32_t kMaxLandingSlots = 16;
inline constexpr uint32_t kMinLandingSlotBytes = 64;
inline constexpr uint32_t kMaxLandingSlotBytes = 16u << 20;

struct LandingOffer {
    uint64_t addr = 0;  // the first slot
    uint32_t rkey = 0;
    uint32_t slot_bytes = 0;  // each slot holds one frame of at most this many bytes
    uint32_t slots = 0;
};

// Writes the offer as kLandingOfferSize bytes ("PGRL", version, fields little-endian).
void encode_landing_offer(const LandingOffer& o, uint8_t* out);
// Reads an offer from a connect request's private data. False when it is not
// one (absent, another version, slots or sizes out of bounds): the peer is
// then only ever SENT to.
bool decode_landing_offer(const void* data, size_t len, LandingOffer* out);

// The writer's side: which slot the next frame lands in, and the slots the
// reader has given back. Frame numbers and counts wrap at 2^32.
class LandingCredits {
  public:
    LandingCredits() = default;
    explicit LandingCredits(const LandingOffer& o) : offer_(o) {}

    bool offered() const { return offer_.slots > 0; }
    // A slot is free and a frame of `bytes` fits it.
    bool can_write(size_t bytes) const {
        return offered() && bytes <= offer_.slot_bytes && written_ - consumed_ < offer_.slots;
    }
    // The next frame's remote address and number (the immediate); wrote()
    // once it is posted.
    uint64_t next_addr() const {
        return offer_.addr + static_cast<uint64_t>(written_ % offer_.slots) * offer_.slot_bytes;
    }
    uint32_t next_number() const { return written_; }
    void wrote() { ++written_; }
    uint32_t rkey() const { return offer_.rkey; }
    // The reader has consumed `consumed` landed frames in all. False (nothing
    // changed) when that is more than were written or fewer than it said before.
    bool on_consumed(uint32_t consumed) {
        const uint32_t back = consumed - consumed_;
        if (back > written_ - consumed_) return false;
        consumed_ = consumed;
        return true;
    }
    uint32_t in_use() const { return written_ - consumed_; }

  private:
    LandingOffer offer_;
    uint32_t written_ = 0, consumed_ = 0;
};

// The reader's side: the frame number it expects next and where it landed.
// A landed frame is checked against this before anything reads it.
class LandingReader {
  public:
    LandingReader() = default;
    LandingReader(uint32_t slots, uint32_t slot_bytes) : slots_(slots), slot_bytes_(slot_bytes) {}

    // The slot of frame `number`, or -1 when it is not the next one or
    // `bytes` do not fit a slot (a peer writing out of turn).
    long slot_of(uint32_t number, size_t bytes) const {
        if (slots_ == 0 || number != consumed_ || bytes > slot_bytes_) return -1;
        return static_cast<long>(number % slots_);
    }
    void consumed_one() { ++consumed_; }
    uint32_t consumed() const { return consumed_; }  // what each SEND's immediate says

  private:
    uint32_t slots_ = 0, slot_bytes_ = 0;
    uint32_t consumed_ = 0;
};

}  // namespace pgrac::tiers
