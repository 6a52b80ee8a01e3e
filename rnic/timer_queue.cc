#include "rnic/timer_queue.hh"

#include "rnic/queue_pair.hh"

namespace jakiro::rnic {

uint64_t timer_queue::due_of(std::size_t at) const {
    return _heap[at]->turn().due_ns;
}

void timer_queue::place(std::size_t at, queue_pair* qp) {
    _heap[at] = qp;
    qp->turn().timer_at = static_cast<uint32_t>(at);
}

void timer_queue::sift_up(std::size_t at) {
    queue_pair* qp = _heap[at];
    const uint64_t due = qp->turn().due_ns;
    while (at > 0) {
        const std::size_t parent = (at - 1) / 2;
        if (due_of(parent) <= due) {
            break;
        }
        place(at, _heap[parent]);
        at = parent;
    }
    place(at, qp);
}

void timer_queue::sift_down(std::size_t at) {
    queue_pair* qp = _heap[at];
    const uint64_t due = qp->turn().due_ns;
    for (;;) {
        std::size_t child = 2 * at + 1;
        if (child >= _heap.size()) {
            break;
        }
        if (child + 1 < _heap.size() && due_of(child + 1) < due_of(child)) {
            ++child;
        }
        if (due <= due_of(child)) {
            break;
        }
        place(at, _heap[child]);
        at = child;
    }
    place(at, qp);
}

void timer_queue::schedule(queue_pair& qp, uint64_t due_ns) {
    qp.turn().due_ns = due_ns;
    _heap.push_back(&qp);  // within the capacity reserve() made for every QP
    sift_up(_heap.size() - 1);
}

void timer_queue::cancel(queue_pair& qp) {
    const uint32_t at = qp.turn().timer_at;
    if (at == not_queued) {
        return;
    }
    qp.turn().timer_at = not_queued;
    queue_pair* last = _heap.back();
    _heap.pop_back();
    if (last == &qp) {
        return;
    }
    place(at, last);
    sift_down(at);
    sift_up(last->turn().timer_at);
}

queue_pair* timer_queue::pop_due(uint64_t now_ns) {
    if (_heap.empty() || due_of(0) > now_ns) {
        return nullptr;
    }
    queue_pair* qp = _heap.front();
    cancel(*qp);
    return qp;
}

uint64_t timer_queue::next_due_ns() const {
    return _heap.empty() ? UINT64_MAX : due_of(0);
}

}  // namespace jakiro::rnic
