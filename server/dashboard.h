// The dashboard's HTTP side (docs/dashboard.md): the embedded page, the browser
// sign-in, and what the /ws upgrade asks of it. The page itself speaks the ordinary protocol
// over /ws (JSON text frames); nothing here knows about queues.
//
//   GET  /, /index.html     the page (with --auth-token-file and no live session: the sign-in
//                           page instead); no-cache, ETag per variant
//   GET  /<asset>           the other embedded files (server/dashboard_assets.h): ETag,
//                           If-None-Match -> 304, gzip when Accept-Encoding allows it
//   POST /signin            form field `token`: the right one gets an HttpOnly, SameSite=Strict
//                           session cookie and a redirect to /; a wrong one, after a delay, the
//                           sign-in page again with "Sign-in failed" and no hint; more than
//                           kMaxFailuresPerSecond failures in a second are refused unchecked (429)
//   POST /signout           ends the session, clears the cookie, redirects to /
// Every answer carries a Content-Security-Policy that allows this origin only. With
// `--dashboard off` none of these paths is the dashboard's (Handle returns nullopt: 404).
//
// The /ws upgrade asks HasSession(cookie) (a browser cannot send `Authorization`), and
// RefusesActions(...) to mark a browser page's connection read-only under
// `--dashboard read-only`.
//
// Thread safety: every method may be called from any thread (sessions are under a mutex).
// Cost: a sign-in or a session lookup is one hash-map operation under that mutex; assets are
// served from static memory (one copy into the response).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/mutex.h"
#include "server/options.h"

namespace sundial::server {

// What the dashboard needs of one HTTP request (views into the caller's request).
struct DashboardRequest {
  std::string_view method;  // "GET", "HEAD", "POST", ...
  std::string_view path;    // without the query string
  std::string_view host;
  std::string_view origin;
  std::string_view cookie;
  std::string_view accept_encoding;
  std::string_view if_none_match;
  std::string_view content_type;
  std::string_view body;
};

struct DashboardReply {
  unsigned status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Type included
  std::string body;
  // Send the reply only after this long (a wrong sign-in token), and close the connection.
  std::chrono::milliseconds delay{0};
  bool close = false;
};

class Dashboard {
 public:
  static constexpr std::string_view kCookieName = "sundial_session";
  static constexpr std::chrono::hours kSessionLifetime{24};
  static constexpr size_t kMaxSessions = 10'000;  // the oldest goes first beyond it
  static constexpr int kMaxFailuresPerSecond = 20;

  struct Config {
    DashboardMode mode = DashboardMode::kOn;
    std::string token;  // --auth-token-file's token; empty: no sign-in
    std::vector<std::string> allowed_origins;
    std::chrono::milliseconds failed_signin_delay{1000};
    std::function<std::chrono::steady_clock::time_point()> now = std::chrono::steady_clock::now;
  };

  explicit Dashboard(Config config);

  // The reply for a dashboard path; nullopt for any other path (the caller's routes go on).
  std::optional<DashboardReply> Handle(const DashboardRequest& request);

  // Whether a Cookie header carries a live session (the /ws upgrade with a token).
  bool HasSession(std::string_view cookie_header);

  // Whether a /ws connection must be refused mutations: under --dashboard read-only, one that
  // comes from a browser page (an Origin header) or was let in by a session cookie. Clients
  // with the Bearer token and no Origin (workers, the CLI) keep every operation.
  bool RefusesActions(bool has_origin, bool by_cookie) const;

  DashboardMode mode() const { return config_.mode; }
  size_t session_count();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;

  DashboardReply Page(const DashboardRequest& request);
  DashboardReply Asset(const DashboardRequest& request);
  DashboardReply SignIn(const DashboardRequest& request);
  DashboardReply SignOut(const DashboardRequest& request);
  DashboardReply SignInPage(unsigned status, std::string_view message);
  bool OriginAllowed(const DashboardRequest& request) const;
  std::optional<std::string> SessionId(std::string_view cookie_header);  // live ones only
  void ExpireSessionsLocked(TimePoint now) REQUIRES(mu_);

  const Config config_;
  Mutex mu_;
  std::unordered_map<std::string, TimePoint> sessions_ GUARDED_BY(mu_);   // id -> expiry
  std::deque<std::pair<TimePoint, std::string>> by_age_ GUARDED_BY(mu_);  // creation order
  std::deque<TimePoint> failures_ GUARDED_BY(mu_);                        // the last second's
};

// The Content-Security-Policy of every dashboard answer.
inline constexpr std::string_view kDashboardCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

}  // namespace sundial::server
