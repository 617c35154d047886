#include "engine/channel_losses.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ramferry::engine {

void ChannelLosses::SetChannels(size_t channels) {
  std::unique_lock<std::mutex> lock(mu_);
  lost_.assign(channels, false);
}

void ChannelLosses::Report(uint32_t channel, const absl::Status& cause) {
  std::unique_lock<std::mutex> lock(mu_);
  reported_.emplace_back(channel, cause);
}

bool ChannelLosses::pending() const {
  std::unique_lock<std::mutex> lock(mu_);
  return !reported_.empty();
}

std::optional<std::pair<uint32_t, absl::Status>> ChannelLosses::TakeNext() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!reported_.empty()) {
    std::pair<uint32_t, absl::Status> next = std::move(reported_.front());
    reported_.pop_front();
    // Both ends may see the same death; the first word counts.
    if (!lost_[next.first]) return next;
  }
  return std::nullopt;
}

std::string ChannelLosses::Declare(uint32_t channel, uint64_t declared,
                                   const absl::Status& cause) {
  std::unique_lock<std::mutex> lock(mu_);
  lost_[channel] = true;
  reports_.push_back({channel, declared, std::string(cause.message())});
  return DescribeChannelLosses(reports_);
}

bool ChannelLosses::lost(uint32_t channel) const {
  std::unique_lock<std::mutex> lock(mu_);
  return lost_[channel];
}

size_t ChannelLosses::live() const {
  std::unique_lock<std::mutex> lock(mu_);
  return static_cast<size_t>(std::count(lost_.begin(), lost_.end(), false));
}

absl::Status ChannelLosses::Acknowledge(uint32_t channel, uint64_t round) {
  std::unique_lock<std::mutex> lock(mu_);
  if (channel >= lost_.size() || acks_.contains(channel)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unexpected CHANNEL_GONE_ACK for channel %d", channel));
  }
  acks_[channel] = round;
  return absl::OkStatus();
}

std::optional<uint64_t> ChannelLosses::acknowledged(uint32_t channel) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = acks_.find(channel);
  if (it == acks_.end()) return std::nullopt;
  return it->second;
}

void ChannelLosses::Settle(uint32_t channel, uint64_t round) {
  std::unique_lock<std::mutex> lock(mu_);
  for (ChannelLoss& l : reports_) {
    if (l.channel == channel) l.round = round;
  }
}

void ChannelLosses::AddResent(uint64_t pages) {
  std::unique_lock<std::mutex> lock(mu_);
  resent_pages_ += pages;
}

void ChannelLosses::RecordUndeclared(uint64_t round) {
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [channel, cause] : reported_) {
    if (lost_[channel]) continue;
    lost_[channel] = true;
    reports_.push_back({channel, round, std::string(cause.message())});
  }
  reported_.clear();
}

std::vector<ChannelLoss> ChannelLosses::reports() const {
  std::unique_lock<std::mutex> lock(mu_);
  return reports_;
}

uint64_t ChannelLosses::resent_pages() const {
  std::unique_lock<std::mutex> lock(mu_);
  return resent_pages_;
}

}  // namespace ramferry::engine
