#include "engine/transport_decorator.h"

#include <mutex>
#include <utility>

namespace ramferry::engine {
namespace {

std::mutex decorator_mu;
TransportDecorator& Decorator() {  // guarded by decorator_mu
  static TransportDecorator* d = new TransportDecorator();
  return *d;
}

}  // namespace

void SetTransportDecoratorForTesting(TransportDecorator decorator) {
  std::lock_guard<std::mutex> lock(decorator_mu);
  Decorator() = std::move(decorator);
}

std::unique_ptr<channels::Transport> DecorateTransport(
    std::unique_ptr<channels::Transport> transport, const TransportSite& site) {
  TransportDecorator d;
  {
    std::lock_guard<std::mutex> lock(decorator_mu);
    d = Decorator();
  }
  if (!d || transport == nullptr) return transport;
  return d(std::move(transport), site);
}

}  // namespace ramferry::engine
