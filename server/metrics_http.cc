// The Prometheus endpoint, kept in its own file: cpp-httplib is a large header.
#include <httplib.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/metrics.h"

namespace diloco::server {

struct MetricsHttpServer::Impl {
  httplib::Server http;
  std::thread thread;
  std::mutex mu;
  std::string text = "# no snapshot yet\n";
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address) {
  const auto colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_address '", address, "': expected host:port"));
  const std::string host = address.substr(0, colon);
  auto impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  raw->http.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> g(raw->mu);
    res.set_content(raw->text, "text/plain; version=0.0.4");
  });
  int bound = port == 0 ? raw->http.bind_to_any_port(host)
                        : (raw->http.bind_to_port(host, port) ? port : -1);
  if (bound < 0)
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", address));
  raw->thread = std::thread([raw] { raw->http.listen_after_bind(); });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl), bound));
}

void MetricsHttpServer::Publish(std::string text) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->text = std::move(text);
}

}  // namespace diloco::server
