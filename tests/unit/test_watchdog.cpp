// The watchdog's heartbeat writer at the end of a run: a write of its file that never returns (a
// shared filesystem that stopped answering, made here with a FIFO that nobody reads) must not hang
// the end of a finished run.
#include "helpers.h"

#include "dptrain/io/reliability.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

using namespace dptrain;

TEST_CASE("watchdog: a heartbeat write that never returns does not hold up stop()", "[watchdog]") {
    const std::string dir = testing::temp_dir("watchdog-beat");
    const std::string fifo = dir + "/.node-a.tmp";  // where the writer opens its next heartbeat
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    auto dog = std::make_unique<Watchdog>(5.0);  // a tick of 0.5 s
    dog->heartbeats(dir, "node-a", true, {"node-a", "node-b"});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the writer now waits in open()
    auto stopped = std::async(std::launch::async, [&] { dog->stop(); });
    const bool in_time = stopped.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    // Whatever happened, the writer is let go (a reader opens the FIFO) so that the test ends.
    int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    CHECK(in_time);
    stopped.wait();
    dog.reset();  // the writer, left behind, must not touch the destroyed watchdog (only ASan, `make DEBUG=1`, sees it)
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (fd >= 0) ::close(fd);
}
