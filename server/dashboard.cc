#include "server/dashboard.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "server/dashboard_assets.h"

namespace sundial::server {
namespace {

constexpr std::string_view kModePlaceholder = "__SUNDIAL_MODE__";
constexpr std::string_view kAuthPlaceholder = "__SUNDIAL_AUTH__";
constexpr std::string_view kMessagePlaceholder = "__SUNDIAL_MESSAGE__";

const EmbeddedAsset* FindAsset(std::string_view path) {
  for (const EmbeddedAsset& a : EmbeddedAssets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

void ReplaceAll(std::string* text, std::string_view from, std::string_view to) {
  for (size_t at = text->find(from); at != std::string::npos; at = text->find(from, at)) {
    text->replace(at, from.size(), to);
    at += to.size();
  }
}

void AddSecurityHeaders(DashboardReply* reply) {
  reply->headers.emplace_back("Content-Security-Policy", std::string(kDashboardCsp));
  reply->headers.emplace_back("X-Content-Type-Options", "nosniff");
  // same-origin, not no-referrer: with no-referrer a form POST carries "Origin: null".
  reply->headers.emplace_back("Referrer-Policy", "same-origin");
  reply->headers.emplace_back("X-Frame-Options", "DENY");
}

DashboardReply Plain(unsigned status, std::string body) {
  DashboardReply r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "text/plain; charset=utf-8");
  r.body = std::move(body);
  AddSecurityHeaders(&r);
  return r;
}

DashboardReply Redirect(std::string_view location) {
  DashboardReply r;
  r.status = 303;
  r.headers.emplace_back("Location", std::string(location));
  r.headers.emplace_back("Cache-Control", "no-store");
  AddSecurityHeaders(&r);
  return r;
}

bool AcceptsGzip(std::string_view accept_encoding) {
  // Enough of RFC 9110 §12.5.3 for browsers: "gzip" listed, and not as "gzip;q=0".
  size_t at = accept_encoding.find("gzip");
  if (at == std::string_view::npos) return false;
  std::string_view rest = accept_encoding.substr(at + 4);
  rest = rest.substr(0, rest.find(','));
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  return !(rest.starts_with(";q=0") && rest.find_first_not_of("0.", 4) == std::string_view::npos);
}

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  if (if_none_match.find('*') != std::string_view::npos) return true;
  // A list of quoted tags, possibly weak (W/"..."): weak comparison (RFC 9110 §13.1.2).
  return if_none_match.find(etag) != std::string_view::npos;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded: the value of `name`, decoded; nullopt when absent.
std::optional<std::string> FormField(std::string_view body, std::string_view name) {
  while (!body.empty()) {
    const size_t amp = body.find('&');
    const std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        out += ' ';
      } else if (raw[i] == '%' && i + 2 < raw.size() && HexValue(raw[i + 1]) >= 0 &&
                 HexValue(raw[i + 2]) >= 0) {
        out += static_cast<char>(HexValue(raw[i + 1]) * 16 + HexValue(raw[i + 2]));
        i += 2;
      } else {
        out += raw[i];
      }
    }
    return out;
  }
  return std::nullopt;
}

// Compares in time that depends on the lengths only, not on where the bytes differ.
bool SameSecret(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The token's surrounding whitespace (a pasted token often ends in a newline) does not count,
// as it does not in --auth-token-file.
std::string_view Trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// 256 random bits as 64 hex digits.
std::string NewSessionId() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // getrandom(2) cannot fail on Linux >= 3.17 once the pool is initialised; refuse to hand
      // out a guessable session rather than go on.
      std::fprintf(stderr, "sundiald: getrandom failed; no dashboard session created\n");
      return {};
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  id.reserve(64);
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

}  // namespace

Dashboard::Dashboard(Config config) : config_(std::move(config)) {}

std::optional<DashboardReply> Dashboard::Handle(const DashboardRequest& request) {
  if (config_.mode == DashboardMode::kOff) return std::nullopt;
  const std::string_view path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (path == "/signin" || path == "/signout") {
    if (request.method != "POST") {
      DashboardReply r = Plain(405, "only POST\n");
      r.headers.emplace_back("Allow", "POST");
      return r;
    }
    return path == "/signin" ? SignIn(request) : SignOut(request);
  }
  const bool page = path == "/" || path == "/index.html";
  // The sign-in template is served only as the answer to `/`.
  if (!page && (path == "/signin.html" || FindAsset(path) == nullptr)) return std::nullopt;
  if (!get) {
    DashboardReply r = Plain(405, "only GET\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  return page ? Page(request) : Asset(request);
}

DashboardReply Dashboard::Page(const DashboardRequest& request) {
  const bool needs_signin = !config_.token.empty();
  if (needs_signin && !SessionId(request.cookie)) return SignInPage(200, "");
  const EmbeddedAsset* index = FindAsset("/index.html");
  if (index == nullptr) return Plain(500, "the dashboard was built without web/index.html\n");
  const std::string_view mode = config_.mode == DashboardMode::kReadOnly ? "read-only" : "full";
  const std::string_view auth = needs_signin ? "session" : "none";
  // One ETag per variant of the page: the file's, the mode and the sign-in kind.
  std::string etag(index->etag.substr(0, index->etag.size() - 1));
  etag += "-";
  etag += mode;
  etag += "-";
  etag += auth;
  etag += "\"";
  DashboardReply r;
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("ETag", etag);
  r.headers.emplace_back("Vary", "Cookie");
  AddSecurityHeaders(&r);
  if (EtagMatches(request.if_none_match, etag)) {
    r.status = 304;
    return r;
  }
  r.headers.emplace_back("Content-Type", std::string(index->content_type));
  r.body.assign(index->body);
  ReplaceAll(&r.body, kModePlaceholder, mode);
  ReplaceAll(&r.body, kAuthPlaceholder, auth);
  return r;
}

DashboardReply Dashboard::Asset(const DashboardRequest& request) {
  const EmbeddedAsset& a = *FindAsset(request.path);
  DashboardReply r;
  // Revalidated on every load (a 304 costs a round trip on loopback): a new sundiald never
  // leaves a page with an old script.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("ETag", std::string(a.etag));
  r.headers.emplace_back("Vary", "Accept-Encoding");
  AddSecurityHeaders(&r);
  if (EtagMatches(request.if_none_match, a.etag)) {
    r.status = 304;
    return r;
  }
  r.headers.emplace_back("Content-Type", std::string(a.content_type));
  if (!a.gzip.empty() && AcceptsGzip(request.accept_encoding)) {
    r.headers.emplace_back("Content-Encoding", "gzip");
    r.body.assign(a.gzip);
  } else {
    r.body.assign(a.body);
  }
  return r;
}

DashboardReply Dashboard::SignInPage(unsigned status, std::string_view message) {
  const EmbeddedAsset* page = FindAsset("/signin.html");
  if (page == nullptr) return Plain(500, "the dashboard was built without web/signin.html\n");
  DashboardReply r;
  r.status = status;
  r.headers.emplace_back("Content-Type", std::string(page->content_type));
  r.headers.emplace_back("Cache-Control", "no-store");
  AddSecurityHeaders(&r);
  r.body.assign(page->body);
  std::string html;
  if (!message.empty()) {
    html = "<p class=\"error\" id=\"signin-error\" role=\"alert\">";
    html += message;  // a constant of this file: nothing from the request is echoed
    html += "</p>";
  }
  ReplaceAll(&r.body, kMessagePlaceholder, html);
  return r;
}

bool Dashboard::OriginAllowed(const DashboardRequest& request) const {
  if (request.origin.empty()) return true;  // not a browser: no cross-site form to fear
  const auto& allowed = config_.allowed_origins;
  if (!allowed.empty()) {
    return std::find(allowed.begin(), allowed.end(), request.origin) != allowed.end();
  }
  const std::string host(request.host);
  return request.origin == "http://" + host || request.origin == "https://" + host;
}

DashboardReply Dashboard::SignIn(const DashboardRequest& request) {
  if (!OriginAllowed(request)) return Plain(403, "origin: not in --allowed-origins\n");
  if (config_.token.empty()) return Redirect("/");  // nothing to sign in to
  const TimePoint now = config_.now();
  {
    MutexLock lock(&mu_);
    while (!failures_.empty() && now - failures_.front() >= std::chrono::seconds(1)) {
      failures_.pop_front();
    }
    if (failures_.size() >= static_cast<size_t>(kMaxFailuresPerSecond)) {
      DashboardReply r = SignInPage(429, "Too many failed sign-ins. Wait a moment and try again.");
      r.headers.emplace_back("Retry-After", "1");
      r.close = true;
      return r;
    }
  }
  const std::optional<std::string> token = FormField(request.body, "token");
  if (!token || !SameSecret(Trimmed(*token), config_.token)) {
    {
      MutexLock lock(&mu_);
      failures_.push_back(now);
    }
    DashboardReply r = SignInPage(401, "Sign-in failed: that is not this server&#8217;s token.");
    r.delay = config_.failed_signin_delay;
    r.close = true;
    return r;
  }
  std::string id = NewSessionId();
  if (id.empty()) return Plain(503, "sign-in: no randomness for a session; try again\n");
  {
    MutexLock lock(&mu_);
    ExpireSessionsLocked(now);
    while (!by_age_.empty() && !sessions_.contains(by_age_.front().second)) by_age_.pop_front();
    while (sessions_.size() >= kMaxSessions && !by_age_.empty()) {
      sessions_.erase(by_age_.front().second);
      by_age_.pop_front();
    }
    sessions_[id] = now + kSessionLifetime;
    by_age_.emplace_back(now, id);
  }
  DashboardReply r = Redirect("/");
  const auto max_age = std::chrono::duration_cast<std::chrono::seconds>(kSessionLifetime).count();
  r.headers.emplace_back(
      "Set-Cookie", std::string(kCookieName) + "=" + id +
                        "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" + std::to_string(max_age));
  return r;
}

DashboardReply Dashboard::SignOut(const DashboardRequest& request) {
  if (!OriginAllowed(request)) return Plain(403, "origin: not in --allowed-origins\n");
  if (std::optional<std::string> id = SessionId(request.cookie)) {
    MutexLock lock(&mu_);
    sessions_.erase(*id);
  }
  DashboardReply r = Redirect("/");
  r.headers.emplace_back(
      "Set-Cookie", std::string(kCookieName) + "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
  return r;
}

std::optional<std::string> Dashboard::SessionId(std::string_view cookie_header) {
  if (config_.token.empty()) return std::nullopt;
  const TimePoint now = config_.now();
  // "a=1; sundial_session=ID; b=2": any cookie of that name that is a live session.
  while (!cookie_header.empty()) {
    const size_t semi = cookie_header.find(';');
    std::string_view pair = cookie_header.substr(0, semi);
    cookie_header =
        semi == std::string_view::npos ? std::string_view() : cookie_header.substr(semi + 1);
    pair = Trimmed(pair);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != kCookieName) continue;
    const std::string id(pair.substr(eq + 1));
    MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    if (it->second <= now) {
      sessions_.erase(it);
      continue;
    }
    return id;
  }
  return std::nullopt;
}

bool Dashboard::HasSession(std::string_view cookie_header) {
  return SessionId(cookie_header).has_value();
}

bool Dashboard::RefusesActions(bool has_origin, bool by_cookie) const {
  return config_.mode == DashboardMode::kReadOnly && (has_origin || by_cookie);
}

size_t Dashboard::session_count() {
  MutexLock lock(&mu_);
  ExpireSessionsLocked(config_.now());
  return sessions_.size();
}

void Dashboard::ExpireSessionsLocked(TimePoint now) {
  // Sessions expire in creation order (one lifetime for all): drop from the front.
  while (!by_age_.empty() && by_age_.front().first + kSessionLifetime <= now) {
    sessions_.erase(by_age_.front().second);
    by_age_.pop_front();
  }
}

}  // namespace sundial::server
