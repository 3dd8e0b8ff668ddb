// The fixture most end-to-end suites share: a fresh sundiald with default flags in a temporary
// directory (tests/e2e/server_process.h) and a blocking client connected to it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "client/client.h"
#include "tests/e2e/server_process.h"

namespace sundial::e2e {

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data");
    ASSERT_TRUE(server_->Start()) << server_->log();
    auto c = client::Client::Connect({"127.0.0.1", server_->port()});
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    client_ = std::move(c).value();
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace sundial::e2e
