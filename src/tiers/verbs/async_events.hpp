// Routing of a device's asynchronous events (CQ overflow, QP fatal, SRQ
// limit, ...) to the transport that owns the object. librdmacm opens each
// device once per process, so every verbs transport in the process shares
// one ibv_context and one async fd: whichever transport reads the fd files
// each event in its owner's inbox and wakes the owner through its eventfd.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>
#include <vector>

namespace pgrac::tiers {

struct VerbsAsyncEvent {
    ibv_event_type type;
    void* object = nullptr;  // the ibv_cq*, ibv_qp* or ibv_srq*; nullptr for device/port events
    int port = 0;
};

class VerbsAsyncInbox {
  public:
    explicit VerbsAsyncInbox(int wakefd) : wakefd_(wakefd) {}
    void push(const VerbsAsyncEvent& e);
    std::vector<VerbsAsyncEvent> take();

  private:
    std::mutex mu_;
    std::vector<VerbsAsyncEvent> events_;
    int wakefd_;
};

// Objects (CQ, QP, SRQ) whose events go to inbox; device and port events of
// ctx go to every inbox registered for ctx.
void verbs_async_attach(ibv_context* ctx, VerbsAsyncInbox* inbox);
void verbs_async_detach(VerbsAsyncInbox* inbox);  // also forgets its objects
void verbs_async_own(void* object, VerbsAsyncInbox* inbox);
void verbs_async_disown(void* object);
// Reads every pending event of ctx (the async fd must be nonblocking) and
// files it. Events of objects nobody owns any more are dropped.
void verbs_async_drain(ibv_context* ctx);

}  // namespace pgrac::tiers
