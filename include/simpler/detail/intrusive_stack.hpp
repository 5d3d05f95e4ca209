// simpler::detail::IntrusiveStack — lock-free multi-producer stack, drained all at once by one
// consumer. Nodes carry their own link (`Node* Node::*Next`), so pushing allocates nothing.
//
// Push is a seq_cst CAS so that an EventCount notify after it cannot miss a sleeper (see
// event_count.hpp). No ABA: nodes are only pushed and taken all together, never popped singly.
#pragma once

#include <atomic>

namespace simpler::detail {

template <class Node, Node* Node::*Next>
class IntrusiveStack {
 public:
  void push(Node* n) noexcept { push_chain(n, n); }
  /// Pushes the chain first -> ... -> last (already linked through Next) with one CAS.
  void push_chain(Node* first, Node* last) noexcept {
    Node* head = head_.load(std::memory_order_relaxed);
    do {
      last->*Next = head;
    } while (!head_.compare_exchange_weak(head, first, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  }
  [[nodiscard]] bool empty() const noexcept {
    return head_.load(std::memory_order_seq_cst) == nullptr;
  }
  /// Takes everything pushed so far, newest first, linked through Next (no walk: for a consumer
  /// to whom order does not matter).
  Node* take_lifo() noexcept { return head_.exchange(nullptr, std::memory_order_acquire); }
  /// Takes everything pushed so far, oldest first, linked through Next.
  Node* take_fifo() noexcept {
    Node* n = head_.exchange(nullptr, std::memory_order_acquire);
    Node* out = nullptr;
    while (n != nullptr) {
      Node* following = n->*Next;
      n->*Next = out;
      out = n;
      n = following;
    }
    return out;
  }

 private:
  std::atomic<Node*> head_{nullptr};
};

}  // namespace simpler::detail
