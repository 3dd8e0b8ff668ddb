// The dashboard's HTTP side without a network (server/dashboard.h): the embedded assets with
// ETag, 304 and gzip, the CSP on every answer, the page's variants, the sign-in flow (wrong
// token: a delay and no hint; the failure limit; the session cookie's attributes), sessions
// expiring and ending at sign-out, and who is refused actions in read-only mode.
#include "server/dashboard.h"

#include <gtest/gtest.h>

#include <string>

#include "server/dashboard_assets.h"

namespace sundial::server {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

std::string HeaderOf(const DashboardReply& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

DashboardRequest Get(std::string_view path) {
  DashboardRequest r;
  r.method = "GET";
  r.path = path;
  r.host = "127.0.0.1:7401";
  return r;
}

DashboardRequest Post(std::string_view path, std::string_view body) {
  DashboardRequest r = Get(path);
  r.method = "POST";
  r.content_type = "application/x-www-form-urlencoded";
  r.body = body;
  return r;
}

// The `sundial_session=ID` part of a Set-Cookie.
std::string CookieOf(const DashboardReply& r) {
  const std::string set = HeaderOf(r, "Set-Cookie");
  return set.substr(0, set.find(';'));
}

class FakeTime {
 public:
  TimePoint now = TimePoint{} + std::chrono::hours(1000);
  std::function<TimePoint()> clock() {
    return [this] { return now; };
  }
};

Dashboard::Config Mode(DashboardMode mode) {
  Dashboard::Config c;
  c.mode = mode;
  return c;
}

Dashboard::Config WithToken(FakeTime* t, DashboardMode mode = DashboardMode::kOn) {
  Dashboard::Config c;
  c.mode = mode;
  c.token = "s3cret-token";
  c.now = t->clock();
  return c;
}

TEST(DashboardAssets, EveryPageAndModuleIsEmbedded) {
  bool index = false, signin = false, app = false, css = false;
  for (const EmbeddedAsset& a : EmbeddedAssets()) {
    index |= a.path == "/index.html";
    signin |= a.path == "/signin.html";
    app |= a.path == "/app.js";
    css |= a.path == "/app.css";
    EXPECT_FALSE(a.body.empty()) << a.path;
    EXPECT_EQ(a.etag.size(), 34u) << a.path;  // quoted 32 hex digits
    EXPECT_FALSE(a.content_type.empty()) << a.path;
  }
  EXPECT_TRUE(index && signin && app && css);
}

TEST(Dashboard, AssetsCarryEtagCspAndGzipWhenAsked) {
  Dashboard d({});
  DashboardRequest req = Get("/app.js");
  auto plain = d.Handle(req);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->status, 200u);
  EXPECT_EQ(HeaderOf(*plain, "Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(HeaderOf(*plain, "Content-Security-Policy"), kDashboardCsp);
  EXPECT_EQ(HeaderOf(*plain, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(HeaderOf(*plain, "Content-Encoding"), "");
  const std::string etag = HeaderOf(*plain, "ETag");
  ASSERT_FALSE(etag.empty());

  req.accept_encoding = "gzip, deflate, br";
  auto gz = d.Handle(req);
  EXPECT_EQ(HeaderOf(*gz, "Content-Encoding"), "gzip");
  EXPECT_LT(gz->body.size(), plain->body.size());
  EXPECT_EQ(static_cast<unsigned char>(gz->body[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(gz->body[1]), 0x8b);
  EXPECT_EQ(HeaderOf(*gz, "Vary"), "Accept-Encoding");

  req.accept_encoding = "gzip;q=0, identity";
  EXPECT_EQ(HeaderOf(*d.Handle(req), "Content-Encoding"), "");

  req.if_none_match = etag;
  auto cached = d.Handle(req);
  EXPECT_EQ(cached->status, 304u);
  EXPECT_TRUE(cached->body.empty());
  req.if_none_match = "\"something-else\"";
  EXPECT_EQ(d.Handle(req)->status, 200u);
}

TEST(Dashboard, CspAllowsThisOriginOnly) {
  const std::string csp(kDashboardCsp);
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe"), std::string::npos);
  EXPECT_EQ(csp.find("http"), std::string::npos) << "no other host named";
  EXPECT_EQ(csp.find('*'), std::string::npos);
}

TEST(Dashboard, PageCarriesItsModeAndHasOneEtagPerVariant) {
  Dashboard full({});
  auto page = full.Handle(Get("/"));
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->status, 200u);
  EXPECT_NE(page->body.find("data-mode=\"full\""), std::string::npos);
  EXPECT_NE(page->body.find("data-auth=\"none\""), std::string::npos);
  EXPECT_EQ(page->body.find("__SUNDIAL_"), std::string::npos);
  EXPECT_EQ(HeaderOf(*page, "Content-Security-Policy"), kDashboardCsp);

  Dashboard read_only(Mode(DashboardMode::kReadOnly));
  auto ro = read_only.Handle(Get("/index.html"));
  EXPECT_NE(ro->body.find("data-mode=\"read-only\""), std::string::npos);
  EXPECT_NE(HeaderOf(*ro, "ETag"), HeaderOf(*page, "ETag"));

  DashboardRequest again = Get("/");
  const std::string etag = HeaderOf(*page, "ETag");
  again.if_none_match = etag;
  EXPECT_EQ(full.Handle(again)->status, 304u);
  EXPECT_EQ(read_only.Handle(again)->status, 200u) << "another variant's ETag";
}

TEST(Dashboard, OffServesNothingAndOtherPathsAreNotItsOwn) {
  Dashboard off(Mode(DashboardMode::kOff));
  EXPECT_FALSE(off.Handle(Get("/")).has_value());
  EXPECT_FALSE(off.Handle(Get("/app.js")).has_value());
  EXPECT_FALSE(off.Handle(Post("/signin", "token=x")).has_value());

  Dashboard on({});
  EXPECT_FALSE(on.Handle(Get("/metrics")).has_value());
  EXPECT_FALSE(on.Handle(Get("/healthz")).has_value());
  EXPECT_FALSE(on.Handle(Get("/no-such-file.js")).has_value());
  EXPECT_FALSE(on.Handle(Get("/signin.html")).has_value()) << "the template is not served raw";
  DashboardRequest put = Get("/");
  put.method = "PUT";
  EXPECT_EQ(on.Handle(put)->status, 405u);
  EXPECT_EQ(on.Handle(Get("/signin"))->status, 405u);
}

TEST(Dashboard, WithATokenThePageIsTheSignInUntilSignedIn) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  auto page = d.Handle(Get("/"));
  EXPECT_EQ(page->status, 200u);
  EXPECT_NE(page->body.find("signin-form"), std::string::npos);
  EXPECT_EQ(page->body.find("signin-error"), std::string::npos);
  EXPECT_EQ(HeaderOf(*page, "Cache-Control"), "no-store");
  EXPECT_EQ(page->body.find("s3cret"), std::string::npos);

  auto in = d.Handle(Post("/signin", "token=s3cret-token"));
  EXPECT_EQ(in->status, 303u);
  EXPECT_EQ(HeaderOf(*in, "Location"), "/");
  EXPECT_EQ(in->delay, milliseconds(0));
  const std::string set = HeaderOf(*in, "Set-Cookie");
  EXPECT_NE(set.find("HttpOnly"), std::string::npos);
  EXPECT_NE(set.find("SameSite=Strict"), std::string::npos);
  EXPECT_NE(set.find("Path=/"), std::string::npos);
  const std::string cookie = CookieOf(*in);
  EXPECT_EQ(cookie.size(), std::string("sundial_session=").size() + 64);

  DashboardRequest signed_in = Get("/");
  const std::string header = "theme=dark; " + cookie + "; other=1";
  signed_in.cookie = header;
  EXPECT_TRUE(d.HasSession(signed_in.cookie));
  auto app = d.Handle(signed_in);
  EXPECT_NE(app->body.find("data-auth=\"session\""), std::string::npos);
  EXPECT_EQ(d.session_count(), 1u);
}

TEST(Dashboard, WrongTokenIsRefusedAfterADelayWithoutAHint) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  auto a = d.Handle(Post("/signin", "token=s3cret-tokem"));
  auto b = d.Handle(Post("/signin", "token=nothing-like-it"));
  auto none = d.Handle(Post("/signin", "other=1"));
  for (const auto* r : {&a, &b, &none}) {
    EXPECT_EQ((*r)->status, 401u);
    EXPECT_EQ((*r)->delay, milliseconds(1000));
    EXPECT_TRUE((*r)->close);
    EXPECT_EQ(HeaderOf(**r, "Set-Cookie"), "");
    EXPECT_NE((*r)->body.find("Sign-in failed"), std::string::npos);
    EXPECT_EQ((*r)->body.find("s3cret"), std::string::npos);
  }
  EXPECT_EQ(a->body, b->body) << "the answer says nothing about how close the guess was";
  EXPECT_EQ(a->body, none->body);
  EXPECT_EQ(d.session_count(), 0u);
}

TEST(Dashboard, TheTokenMayBeUrlEncodedAndEndInWhitespace) {
  FakeTime t;
  Dashboard::Config c = WithToken(&t);
  c.token = "a+b/c=d e";
  Dashboard d(c);
  EXPECT_EQ(d.Handle(Post("/signin", "token=a%2Bb%2Fc%3Dd+e%0A"))->status, 303u);
  EXPECT_EQ(d.Handle(Post("/signin", "token=a%2Bb%2Fc%3Dd"))->status, 401u);
}

TEST(Dashboard, FailuresBeyondTheLimitPerSecondAreNotChecked) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  for (int i = 0; i < Dashboard::kMaxFailuresPerSecond; ++i) {
    EXPECT_EQ(d.Handle(Post("/signin", "token=guess"))->status, 401u);
  }
  auto limited = d.Handle(Post("/signin", "token=s3cret-token"));
  EXPECT_EQ(limited->status, 429u) << "even the right token waits while guesses are refused";
  EXPECT_EQ(HeaderOf(*limited, "Set-Cookie"), "");
  t.now += std::chrono::seconds(1);
  EXPECT_EQ(d.Handle(Post("/signin", "token=s3cret-token"))->status, 303u);
}

TEST(Dashboard, SignOutEndsTheSession) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  const std::string cookie = CookieOf(*d.Handle(Post("/signin", "token=s3cret-token")));
  ASSERT_TRUE(d.HasSession(cookie));
  DashboardRequest out = Post("/signout", "");
  out.cookie = cookie;
  auto r = d.Handle(out);
  EXPECT_EQ(r->status, 303u);
  EXPECT_NE(HeaderOf(*r, "Set-Cookie").find("Max-Age=0"), std::string::npos);
  EXPECT_FALSE(d.HasSession(cookie));
  DashboardRequest page = Get("/");
  page.cookie = cookie;
  EXPECT_NE(d.Handle(page)->body.find("signin-form"), std::string::npos);
}

TEST(Dashboard, SessionsExpireAfterTheirLifetime) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  const std::string cookie = CookieOf(*d.Handle(Post("/signin", "token=s3cret-token")));
  t.now += Dashboard::kSessionLifetime - std::chrono::seconds(1);
  EXPECT_TRUE(d.HasSession(cookie));
  t.now += std::chrono::seconds(1);
  EXPECT_FALSE(d.HasSession(cookie));
  EXPECT_EQ(d.session_count(), 0u);
}

TEST(Dashboard, ForgedOrForeignCookiesAreNotSessions) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  (void)d.Handle(Post("/signin", "token=s3cret-token"));
  EXPECT_FALSE(d.HasSession(""));
  EXPECT_FALSE(d.HasSession("sundial_session="));
  EXPECT_FALSE(d.HasSession("sundial_session=" + std::string(64, 'a')));
  EXPECT_FALSE(d.HasSession("sundial_session"));
  Dashboard open({});
  EXPECT_FALSE(open.HasSession("sundial_session=x")) << "no token, no sessions";
}

TEST(Dashboard, CrossSiteFormsAreRefused) {
  FakeTime t;
  Dashboard d(WithToken(&t));
  DashboardRequest req = Post("/signin", "token=s3cret-token");
  req.origin = "https://evil.example";
  EXPECT_EQ(d.Handle(req)->status, 403u);
  req.origin = "http://127.0.0.1:7401";
  EXPECT_EQ(d.Handle(req)->status, 303u);
}

TEST(Dashboard, ReadOnlyRefusesBrowserPagesOnly) {
  Dashboard read_only(Mode(DashboardMode::kReadOnly));
  EXPECT_TRUE(read_only.RefusesActions(/*has_origin=*/true, /*by_cookie=*/false));
  EXPECT_TRUE(read_only.RefusesActions(false, true));
  EXPECT_FALSE(read_only.RefusesActions(false, false)) << "a worker with the Bearer token";
  Dashboard on({});
  EXPECT_FALSE(on.RefusesActions(true, true));
}

}  // namespace
}  // namespace sundial::server
