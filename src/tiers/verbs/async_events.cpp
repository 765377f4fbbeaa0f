// Process-wide routing table of verbs async events.
#include "tiers/verbs/async_events.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace pgrac::tiers {

namespace {

struct Registry {
    std::mutex mu;
    std::vector<std::pair<ibv_context*, VerbsAsyncInbox*>> inboxes;
    std::unordered_map<void*, VerbsAsyncInbox*> owners;
};

Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: safe at exit
    return *r;
}

}  // namespace

void VerbsAsyncInbox::push(const VerbsAsyncEvent& e) {
    {
        std::lock_guard<std::mutex> g(mu_);
        events_.push_back(e);
    }
    const uint64_t one = 1;
    if (write(wakefd_, &one, sizeof one) < 0) {
        // eventfd full or closed: the owner polls its inbox anyway
    }
}

std::vector<VerbsAsyncEvent> VerbsAsyncInbox::take() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<VerbsAsyncEvent> out;
    out.swap(events_);
    return out;
}

void verbs_async_attach(ibv_context* ctx, VerbsAsyncInbox* inbox) {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.inboxes.emplace_back(ctx, inbox);
}

void verbs_async_detach(VerbsAsyncInbox* inbox) {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.inboxes.erase(std::remove_if(r.inboxes.begin(), r.inboxes.end(),
                                   [&](const auto& p) { return p.second == inbox; }),
                    r.inboxes.end());
    for (auto it = r.owners.begin(); it != r.owners.end();)
        it = it->second == inbox ? r.owners.erase(it) : std::next(it);
}

void verbs_async_own(void* object, VerbsAsyncInbox* inbox) {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.owners[object] = inbox;
}

void verbs_async_disown(void* object) {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.owners.erase(object);
}

void verbs_async_drain(ibv_context* ctx) {
    Registry& r = registry();
    for (;;) {
        ibv_async_event ev;
        if (ibv_get_async_event(ctx, &ev) != 0) return;  // EAGAIN: drained
        VerbsAsyncEvent e;
        e.type = ev.event_type;
        switch (ev.event_type) {
            case IBV_EVENT_CQ_ERR:
                e.object = ev.element.cq;
                break;
            case IBV_EVENT_SRQ_ERR:
            case IBV_EVENT_SRQ_LIMIT_REACHED:
                e.object = ev.element.srq;
                break;
            case IBV_EVENT_PORT_ACTIVE:
            case IBV_EVENT_PORT_ERR:
            case IBV_EVENT_LID_CHANGE:
            case IBV_EVENT_PKEY_CHANGE:
            case IBV_EVENT_SM_CHANGE:
            case IBV_EVENT_CLIENT_REREGISTER:
            case IBV_EVENT_GID_CHANGE:
                e.port = ev.element.port_num;
                break;
            case IBV_EVENT_DEVICE_FATAL:
                break;
            default:  // QP events
                e.object = ev.element.qp;
                break;
        }
        ibv_ack_async_event(&ev);  // before any owner can destroy the object
        std::lock_guard<std::mutex> g(r.mu);
        if (e.object != nullptr) {
            auto it = r.owners.find(e.object);
            if (it != r.owners.end()) it->second->push(e);
        } else {
            for (auto& [c, inbox] : r.inboxes)
                if (c == ctx) inbox->push(e);
        }
    }
}

}  // namespace pgrac::tiers
