// UROCE_FAULTS: parsing a fault-injection specification into a FaultConfig
// (include/uroce/faults.hpp) and printing one back.  FaultIo applies it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "net/fault_io.hpp"

namespace uroce {

// ------------------------------------------------------------- UROCE_FAULTS

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_double(std::string_view s, double& out) {
  std::string str(trim(s));
  if (str.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(str.c_str(), &end);
  return errno == 0 && end == str.c_str() + str.size() && std::isfinite(out);
}

bool parse_u64(std::string_view s, uint64_t& out) {
  std::string str(trim(s));
  if (str.empty() || str[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(str.c_str(), &end, 0);
  return errno == 0 && end == str.c_str() + str.size();
}

// "0.05" or "5%", in [0, 1].
bool parse_rate(std::string_view s, double& out) {
  s = trim(s);
  bool pct = !s.empty() && s.back() == '%';
  if (pct) s.remove_suffix(1);
  if (!parse_double(s, out)) return false;
  if (pct) out /= 100;
  return out >= 0 && out <= 1;
}

// "200us", "2ms", "1s", "150" (microseconds): at most 60 s.
bool parse_duration_us(std::string_view s, uint32_t& out) {
  s = trim(s);
  double mult = 1;
  if (s.ends_with("us")) {
    s.remove_suffix(2);
  } else if (s.ends_with("ms")) {
    s.remove_suffix(2);
    mult = 1000;
  } else if (s.ends_with("s")) {
    s.remove_suffix(1);
    mult = 1e6;
  }
  double v;
  if (!parse_double(s, v) || v < 0) return false;
  v *= mult;
  if (v > 60e6) return false;
  out = uint32_t(std::llround(v));
  return true;
}

Status bad(std::string_view item, const std::string& why) {
  return err::inval("UROCE_FAULTS item '" + std::string(item) + "': " + why);
}

struct OpName {
  const char* name;
  uint32_t bits;
};
constexpr OpName kOpNames[] = {
    {"data", fault_ops::kData}, {"read", fault_ops::kRead},   {"atomic", fault_ops::kAtomic}, {"ack", fault_ops::kAck},
    {"ud", fault_ops::kUd},     {"other", fault_ops::kOther}, {"all", fault_ops::kAll},
};

// Applies one rate item (key without direction prefix) to `r`.
Status apply_rate(std::string_view item, std::string_view key, std::string_view val, FaultRates& r) {
  std::string_view rate = val, param;
  if (auto c = val.find(':'); c != std::string_view::npos) {
    rate = val.substr(0, c);
    param = val.substr(c + 1);
  }
  double p;
  if (!parse_rate(rate, p)) return bad(item, "the rate must be a probability 0..1 or a percentage");
  if (key == "drop") {
    r.drop = p;
  } else if (key == "dup" || key == "duplicate") {
    r.dup = p;
  } else if (key == "corrupt") {
    r.corrupt = p;
  } else if (key == "ce") {
    r.ce = p;
  } else if (key == "reorder") {
    r.reorder = p;
    if (!param.empty()) {
      uint64_t n;
      if (!parse_u64(param, n) || n < 1 || n > 4096) return bad(item, "the reorder distance must be 1..4096 packets");
      r.reorder_max = uint32_t(n);
    }
    return {};
  } else if (key == "delay") {
    r.delay = p;
    if (!param.empty() && !parse_duration_us(param, r.delay_max_us))
      return bad(item, "the delay must be a duration up to 60s (200us, 2ms, 1s)");
    return {};
  } else {
    return bad(item, "unknown key (seed, drop, dup, reorder, delay, corrupt, ce, dir, ops, off)");
  }
  if (!param.empty()) return bad(item, "takes no ':' parameter");
  return {};
}

}  // namespace

Result<FaultConfig> parse_faults(std::string_view spec) {
  FaultConfig cfg;
  bool to_tx = true, to_rx = false;
  // Unprefixed rates go to the directions `dir` names, wherever it stands;
  // prefixed ones (tx.drop=) override them.
  std::vector<std::pair<std::string_view, std::string_view>> plain, tx_items, rx_items;
  std::vector<std::string_view> raw_items;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = trim(spec.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty() || item == "off" || item == "none") continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) return bad(item, "expected key=value");
    std::string_view key = trim(item.substr(0, eq)), val = trim(item.substr(eq + 1));
    if (key == "seed") {
      if (!parse_u64(val, cfg.seed)) return bad(item, "the seed must be an unsigned integer");
    } else if (key == "dir") {
      if (val == "tx")
        to_tx = true, to_rx = false;
      else if (val == "rx")
        to_tx = false, to_rx = true;
      else if (val == "both")
        to_tx = to_rx = true;
      else
        return bad(item, "dir must be tx, rx or both");
    } else if (key == "ops") {
      uint32_t ops = 0;
      size_t p = 0;
      while (p <= val.size()) {
        size_t e = val.find_first_of("+|", p);
        if (e == std::string_view::npos) e = val.size();
        std::string_view name = trim(val.substr(p, e - p));
        p = e + 1;
        bool found = false;
        for (const OpName& o : kOpNames)
          if (name == o.name) ops |= o.bits, found = true;
        if (!found)
          return bad(item,
                     "unknown packet class '" + std::string(name) + "' (data, read, atomic, ack, ud, other, all)");
      }
      cfg.ops = ops;
    } else if (key.starts_with("tx.")) {
      tx_items.emplace_back(item, key.substr(3));
    } else if (key.starts_with("rx.")) {
      rx_items.emplace_back(item, key.substr(3));
    } else {
      plain.emplace_back(item, key);
    }
  }
  auto value_of = [](std::string_view item) { return trim(item.substr(item.find('=') + 1)); };
  for (auto [item, key] : plain) {
    if (to_tx) UROCE_TRY(apply_rate(item, key, value_of(item), cfg.tx));
    if (to_rx) UROCE_TRY(apply_rate(item, key, value_of(item), cfg.rx));
  }
  for (auto [item, key] : tx_items) UROCE_TRY(apply_rate(item, key, value_of(item), cfg.tx));
  for (auto [item, key] : rx_items) UROCE_TRY(apply_rate(item, key, value_of(item), cfg.rx));
  return cfg;
}

std::string to_string(const FaultConfig& cfg) {
  std::string s = "seed=" + std::to_string(cfg.seed);
  char b[96];
  auto rates = [&](const char* dir, const FaultRates& r) {
    auto add = [&](const char* key, double p) {
      if (p <= 0) return;
      std::snprintf(b, sizeof b, ",%s.%s=%.9g", dir, key, p);
      s += b;
    };
    add("drop", r.drop);
    add("dup", r.dup);
    if (r.reorder > 0) {
      std::snprintf(b, sizeof b, ",%s.reorder=%.9g:%u", dir, r.reorder, r.reorder_max);
      s += b;
    }
    if (r.delay > 0) {
      std::snprintf(b, sizeof b, ",%s.delay=%.9g:%uus", dir, r.delay, r.delay_max_us);
      s += b;
    }
    add("corrupt", r.corrupt);
    add("ce", r.ce);
  };
  rates("tx", cfg.tx);
  rates("rx", cfg.rx);
  if (cfg.ops != fault_ops::kAll) {
    std::string ops;
    for (const OpName& o : kOpNames)
      if (o.bits != fault_ops::kAll && (cfg.ops & o.bits)) {
        if (!ops.empty()) ops += '+';
        ops += o.name;
      }
    s += ",ops=" + (ops.empty() ? std::string("none") : ops);
  }
  return s;
}

}  // namespace uroce
