// Stand-in for <gloo/common/memory.h>, which Debian's libgloo-dev (0.0~git20220518, "Gloo 0.5")
// does not ship although gloo/transport/tcp/{context,pair,unbound_buffer}.h include it. Without
// it those public headers cannot be compiled at all.
//
// The three classes let Gloo's I/O thread hold short-lived references to an unbound buffer that
// the user thread may destroy at any time: the buffer owns a ShareableNonOwningPtr to itself,
// hands out WeakNonOwningPtrs, the I/O thread turns one into a NonOwningPtr while it touches the
// buffer, and the owner's destructor waits until no NonOwningPtr is left.
//
// Layout matters, not just behaviour: libgloo.so was compiled against the original, and
// tcp::UnboundBuffer embeds a ShareableNonOwningPtr. Each class here therefore holds exactly one
// std::shared_ptr<T> or std::weak_ptr<T>, as the original does. Delete this file (and the
// gloo_compat target) once the package ships the header.
#pragma once

#include <memory>
#include <thread>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

// A strong reference for the duration of one use; empty if the object is already gone.
template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() {}
  explicit NonOwningPtr(const WeakNonOwningPtr<T>& weak) : ptr_(weak.ptr_.lock()) {}

  T* operator->() const noexcept { return ptr_.get(); }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  std::shared_ptr<T> ptr_;
};

// A weak reference handed out by the owner.
template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() {}
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& root) : ptr_(root.ptr_) {}

  // True once it refers to an owner at all (even one that has since gone away).
  explicit operator bool() const noexcept {
    const std::weak_ptr<T> empty;
    return ptr_.owner_before(empty) || empty.owner_before(ptr_);
  }

 protected:
  std::weak_ptr<T> ptr_;

  friend class NonOwningPtr<T>;
};

// The owner's root reference; does not own or delete the object.
template <typename T>
class ShareableNonOwningPtr final {
 public:
  explicit ShareableNonOwningPtr(T* object) : ptr_(object, [](T*) {}) {}
  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(const ShareableNonOwningPtr&) = delete;

  // Blocks until every NonOwningPtr made from it has been released.
  ~ShareableNonOwningPtr() {
    std::weak_ptr<T> weak = ptr_;
    ptr_.reset();
    while (!weak.expired()) std::this_thread::yield();
  }

 protected:
  std::shared_ptr<T> ptr_;

  friend class WeakNonOwningPtr<T>;
};

}  // namespace gloo
