// ReadJobEnv: the one reader of the launcher's environment. Set variables are typed, unset ones
// keep their defaults, Paddle's older spellings are read, and a malformed value is an error
// naming the variable.
#include "base/job_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace loom {
namespace {

const std::vector<std::string> kNames = {"PADDLE_TRAINING_ROLE",     "TRAINING_ROLE",
                                         "PADDLE_PSERVER_ENDPOINTS", "PADDLE_PSERVERS_IP_PORT_LIST",
                                         "PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT",
                                         "PADDLE_TRAINER_ID",        "PADDLE_PSERVER_ID",
                                         "PADDLE_TRAINERS_NUM",      "LOOM_CLIENT_ID",
                                         "LOOM_NUM_CLIENTS",         "LOOM_CLIENT_RANK",
                                         "LOOM_CLIENT_SIZE",         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "LOOM_LOCAL_PROCESSES"};

// Clears the launcher's variables for a test and restores them after it.
class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& n : kNames) {
      const char* v = std::getenv(n.c_str());
      if (v != nullptr) saved_.push_back({n, v});
      unsetenv(n.c_str());
    }
  }
  void TearDown() override {
    for (const auto& n : kNames) unsetenv(n.c_str());
    for (const auto& [n, v] : saved_) setenv(n.c_str(), v.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(JobEnvTest, UnsetIsNoJob) {
  StatusOr<JobEnv> job = ReadJobEnv();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->role, JobRole::kNone);
  EXPECT_TRUE(job->server_endpoints.empty());
  EXPECT_EQ(job->trainer_id, -1);
  EXPECT_EQ(job->server_id, -1);
  EXPECT_EQ(job->trainers, 0);
  EXPECT_EQ(job->client_id, -1);
  EXPECT_EQ(job->local_processes, 0);
  EXPECT_STREQ(JobRoleName(job->role), "");
}

TEST_F(JobEnvTest, ATrainerOfALaunchedJob) {
  setenv("PADDLE_TRAINING_ROLE", "TRAINER", 1);
  setenv("PADDLE_PSERVER_ENDPOINTS", "10.0.0.1:6170,,10.0.0.2:6170", 1);
  setenv("PADDLE_TRAINER_ID", "3", 1);
  setenv("PADDLE_TRAINERS_NUM", "4", 1);
  setenv("LOOM_LOCAL_PROCESSES", "6", 1);
  StatusOr<JobEnv> job = ReadJobEnv();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->role, JobRole::kTrainer);
  EXPECT_EQ(job->server_endpoints, (std::vector<std::string>{"10.0.0.1:6170", "10.0.0.2:6170"}));
  EXPECT_EQ(job->trainer_id, 3);
  EXPECT_EQ(job->trainers, 4);
  EXPECT_EQ(job->local_processes, 6);
  // mpirun's count of the processes on this host comes first.
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(ReadJobEnv()->local_processes, 2);
}

TEST_F(JobEnvTest, PaddlesOtherSpellingsAreRead) {
  setenv("TRAINING_ROLE", "PSERVER", 1);
  setenv("PADDLE_PSERVERS_IP_PORT_LIST", "h:1,h:2", 1);
  setenv("PADDLE_CURRENT_ENDPOINT", "h:2", 1);
  StatusOr<JobEnv> job = ReadJobEnv();
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->role, JobRole::kServer);
  EXPECT_STREQ(JobRoleName(job->role), "PSERVER");
  EXPECT_EQ(job->server_endpoints, (std::vector<std::string>{"h:1", "h:2"}));
  EXPECT_EQ(job->current_endpoint, "h:2");
}

TEST_F(JobEnvTest, MalformedValuesAreErrorsNamingTheVariable) {
  setenv("PADDLE_TRAINING_ROLE", "WORKER", 1);
  StatusOr<JobEnv> job = ReadJobEnv();
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("PADDLE_TRAINING_ROLE='WORKER'"), std::string::npos)
      << job.status().ToString();
  unsetenv("PADDLE_TRAINING_ROLE");
  for (const char* name : {"PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "LOOM_CLIENT_RANK"}) {
    for (const char* bad : {"x", "-1", "3x"}) {
      setenv(name, bad, 1);
      job = ReadJobEnv();
      ASSERT_FALSE(job.ok()) << name << "=" << bad;
      EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(job.status().message().find(std::string(name) + "='" + bad + "'"),
                std::string::npos)
          << job.status().ToString();
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace loom
