// Mints, on demand and off the network threads, the leaf certificate the
// proxy presents to an agent for an intercepted host, and keeps the ready
// server TLS contexts in a bounded LRU cache.
//
//   auto r = co_await minter.async_mint(host, use_task);  // idemgate::use_task (ledger/executor.hpp)
//   if (!r.ok()) ...;  // r.error says why
//   boost::asio::ssl::stream<tcp::socket&> tls(socket, *r.value);
#pragma once

#include "tls/ca.hpp"

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace idemgate::tls {

// A server context (TLS 1.2+, ALPN http/1.1) holding the leaf, its key and
// the CA as chain. Shared: every session for the host uses the same one.
using ServerContextPtr = std::shared_ptr<boost::asio::ssl::context>;
using MintResult = Result<ServerContextPtr>;

// How long a minted leaf is valid. Browsers cap at 398 days; a short life
// limits what a leaked leaf key is worth.
inline constexpr std::chrono::hours leaf_lifetime{24 * 30};

// Mints one leaf context synchronously: the work the pool does. Exposed for
// tests and tools; never call it on a network thread.
MintResult mint_server_context(const CertificateAuthority& ca, std::string_view host);

class LeafMinter {
 public:
  using Signature = void(MintResult);

  struct Stats {
    std::uint64_t minted = 0;     // leaves signed
    std::uint64_t cache_hits = 0;
    std::uint64_t coalesced = 0;  // requests that waited for a mint already running
    std::uint64_t evicted = 0;    // dropped by the capacity bound or near expiry
    std::uint64_t failed = 0;
    std::size_t cached = 0;
  };

  // cache_capacity is config tls.leaf_cache (0: no cache, every request mints,
  // concurrent ones still once). `threads` minting threads.
  LeafMinter(CaPtr ca, std::size_t cache_capacity, std::size_t threads = 1);
  ~LeafMinter();
  LeafMinter(const LeafMinter&) = delete;
  LeafMinter& operator=(const LeafMinter&) = delete;

  // Completes with a MintResult on the handler's associated executor (for
  // use_awaitable: the coroutine's), never inline. Requests for a host that
  // is being minted wait for that mint. Never throws into the handler path.
  template <class CompletionToken>
  auto async_mint(std::string_view host, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, Signature>(
        [this](auto handler, std::string h) {
          // A hit goes straight to the handler's executor; only a miss takes
          // the type-erased path through the minting pool.
          if (auto hit = cached(h)) {
            boost::asio::post(boost::asio::append(std::move(handler), MintResult{std::move(hit), {}}));
            return;
          }
          start(std::move(h), boost::asio::any_completion_handler<Signature>(std::move(handler)));
        },
        token, std::string(host));
  }

  // The same with the executor given explicitly: `handler(MintResult)` runs on `ex`.
  template <class Executor, class Handler>
  void mint_async(std::string_view host, const Executor& ex, Handler&& handler) {
    async_mint(host, boost::asio::bind_executor(ex, std::forward<Handler>(handler)));
  }

  // The cached context, or null; never mints. Lets a session skip the hop to
  // the pool for a host it has seen.
  ServerContextPtr cached(std::string_view host);

  Stats stats() const;

 private:
  struct Waiter {
    boost::asio::any_completion_handler<Signature> handler;
    boost::asio::any_completion_executor work;  // keeps the caller's executor running
  };
  struct Entry {
    std::string host;
    ServerContextPtr context;
    std::chrono::system_clock::time_point refresh_after;
  };

  void start(std::string host, boost::asio::any_completion_handler<Signature> handler);
  void run_mint(const std::string& host);
  void complete(Waiter waiter, MintResult result);
  ServerContextPtr lookup_locked(const std::string& host);
  void insert_locked(const std::string& host, ServerContextPtr context);

  const CaPtr ca_;
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, std::vector<Waiter>> pending_;
  Stats stats_;
  boost::asio::thread_pool pool_;  // last: joined before the members its jobs use go away
};

}  // namespace idemgate::tls
