#include "tests/testing/sockets.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace chaosbed::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kTcpListen = 0x0A;  // include/net/tcp_states.h

struct TableEntry {
  std::string local;
  int port = 0;
  bool loopback = false;
  int state = 0;
};

// "0100007F:1F90" (IPv4) or 32 hex digits ":port" (IPv6): each 32-bit group is printed as the kernel holds
// it in memory, so a group read as a native integer has the address's bytes in order.
bool decodeAddress(const std::string& text, bool v6, TableEntry* out) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  const std::string hex = text.substr(0, colon);
  const unsigned port = unsigned(std::strtoul(text.c_str() + colon + 1, nullptr, 16));
  if (hex.size() != (v6 ? 32u : 8u)) return false;
  out->port = int(port);
  unsigned char bytes[16];
  for (size_t g = 0; g < hex.size() / 8; ++g) {
    const uint32_t word = uint32_t(std::strtoul(hex.substr(g * 8, 8).c_str(), nullptr, 16));
    std::memcpy(bytes + g * 4, &word, 4);
  }
  char buf[INET6_ADDRSTRLEN];
  char shown[INET6_ADDRSTRLEN + 16];
  if (!v6) {
    in_addr a;
    std::memcpy(&a, bytes, 4);
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    out->loopback = bytes[0] == 127;
    std::snprintf(shown, sizeof shown, "%s:%u", buf, port);
  } else {
    in6_addr a;
    std::memcpy(&a, bytes, 16);
    inet_ntop(AF_INET6, &a, buf, sizeof buf);
    out->loopback = IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
    std::snprintf(shown, sizeof shown, "[%s]:%u", buf, port);
  }
  out->local = std::string(shown);
  return true;
}

// inode -> entry, for one table of one network namespace.
std::map<unsigned long, TableEntry> readTable(const fs::path& file, bool v6) {
  std::map<unsigned long, TableEntry> out;
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) continue;
    TableEntry e;
    if (!decodeAddress(local, v6, &e)) continue;
    e.state = int(std::strtol(state.c_str(), nullptr, 16));
    out[inode] = e;
  }
  return out;
}

}  // namespace

std::string IpSocket::toString() const {
  return "pid " + std::to_string(pid) + " " + proto + " " + local + (listening ? " LISTEN" : "");
}

std::vector<pid_t> processTree(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    if (!std::getline(stat, text)) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    if (rest >> state >> ppid) children[ppid].push_back(pid_t(std::stol(name)));
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i)
    for (pid_t c : children[out[i]]) out.push_back(c);
  return out;
}

std::vector<IpSocket> ipSocketsOf(const std::vector<pid_t>& pids) {
  std::vector<IpSocket> out;
  for (pid_t pid : pids) {
    const fs::path proc = fs::path("/proc") / std::to_string(pid);
    std::set<unsigned long> inodes;
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(proc / "fd", ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd.path(), link_ec).string();
      if (!link_ec && target.rfind("socket:[", 0) == 0) inodes.insert(std::stoul(target.substr(8)));
    }
    if (inodes.empty()) continue;
    for (const auto& [proto, v6] : {std::pair{"tcp", false}, {"tcp6", true}, {"udp", false}, {"udp6", true}}) {
      const bool tcp = std::string(proto).starts_with("tcp");
      for (const auto& [inode, e] : readTable(proc / "net" / proto, v6)) {
        if (!inodes.count(inode)) continue;
        IpSocket s;
        s.pid = pid;
        s.proto = proto;
        s.local = e.local;
        s.port = e.port;
        s.loopback = e.loopback;
        s.listening = tcp ? e.state == kTcpListen : e.port != 0;
        out.push_back(std::move(s));
      }
    }
  }
  return out;
}

std::string executableOf(pid_t pid) {
  std::error_code ec;
  return fs::read_symlink(fs::path("/proc") / std::to_string(pid) / "exe", ec).string();
}

}  // namespace chaosbed::testing
