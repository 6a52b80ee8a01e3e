// Which namespace a vNIC's RDMA endpoint is bound in, when YAML names none: the one the kernel
// says holds the peer of the vNIC's host-side veth, whatever the tenants do inside their own
// namespaces. Each test builds its own little host (a child process in a fresh network
// namespace, tenants in namespaces of their own held by sleeping children), so nothing of the
// machine's is touched. Needs root (CLONE_NEWNET), as the channel server's namespace tests do.

#include "rnic/verbs/tenant_namespace.hh"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace jakiro::verbs {
namespace {

// A process that sits in a network namespace of its own until killed: a tenant.
pid_t tenant() {
    int ready[2];
    if (pipe(ready) != 0) {
        return -1;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        const char ok = unshare(CLONE_NEWNET) == 0 ? 'y' : 'n';
        [[maybe_unused]] const ssize_t w = write(ready[1], &ok, 1);
        for (;;) {
            pause();
        }
    }
    close(ready[1]);
    char ok = 'n';
    [[maybe_unused]] const ssize_t r = read(ready[0], &ok, 1);
    close(ready[0]);
    return ok == 'y' ? pid : -1;
}

bool sh(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

std::string in_tenant(pid_t pid, const std::string& command) {
    return "nsenter --net=/proc/" + std::to_string(pid) + "/ns/net " + command;
}

// Runs `scenario` in a child process in a fresh network namespace (the host), with the tenants
// it starts killed afterwards; returns the line the scenario printed (its verdict), or why it
// could not run.
std::string on_a_host_of_its_own(const std::function<std::string(std::vector<pid_t>&)>& scenario) {
    if (geteuid() != 0) {
        return "needs root";
    }
    int out[2];
    if (pipe(out) != 0) {
        return "pipe";
    }
    const pid_t host = fork();
    if (host == 0) {
        close(out[0]);
        std::string verdict = "cannot unshare";
        if (unshare(CLONE_NEWNET) == 0) {
            std::vector<pid_t> tenants;
            verdict = scenario(tenants);
            for (const pid_t t : tenants) {
                kill(t, SIGKILL);
                waitpid(t, nullptr, 0);
            }
        }
        [[maybe_unused]] const ssize_t w = write(out[1], verdict.data(), verdict.size());
        _exit(0);
    }
    close(out[1]);
    std::string verdict;
    char buf[256];
    for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) {
        verdict.append(buf, static_cast<std::size_t>(n));
    }
    close(out[0]);
    waitpid(host, nullptr, 0);
    return verdict;
}

// Which of the tenants' namespaces `ns` is ("victim", "attacker"), or "none".
std::string who(const tenant_namespace& ns, pid_t victim, pid_t attacker) {
    return ns.holds_process(victim) ? "victim" : ns.holds_process(attacker) ? "attacker" : "none";
}

constexpr const char* victim_mac = "02:00:c6:13:01:01";

// The attack of a tenant that makes itself look like another from the inside: an interface
// with the victim's MAC and the very ifindex the victim's eth0 has. The endpoint is still bound
// in the victim's namespace, and it would be whatever the attacker's interfaces look like.
TEST(TenantNamespace, AVethPeersNamespaceIsWhatTheKernelSaysNotWhatATenantsInterfacesLookLike) {
    const std::string verdict = on_a_host_of_its_own([](std::vector<pid_t>& tenants) {
        const pid_t victim = tenant();
        const pid_t attacker = tenant();
        tenants = {victim, attacker};
        if (victim < 0 || attacker < 0 ||
            !sh("ip link add t1 type veth peer name eth0 netns " + std::to_string(victim)) ||
            !sh(in_tenant(victim, std::string("ip link set eth0 address ") + victim_mac))) {
            return std::string("cannot build the host");
        }
        // "4: t1@if2: <...": the index of its peer, the victim's eth0 (this host's /sys shows
        // another namespace's interfaces, so ask ip).
        FILE* f = popen("ip -o link show t1", "r");
        int peer_index = 0;
        if (f == nullptr || std::fscanf(f, "%*d: t1@if%d", &peer_index) != 1) {
            return std::string("no peer index");
        }
        pclose(f);
        // The attacker's own eth0 (a veth of its vNIC) takes the victim's MAC, and, unless it
        // has the victim's ifindex already, another interface comes with that index and MAC.
        const std::string mimic = "ip link add mimic index " + std::to_string(peer_index) +
                                  " address " + victim_mac + " type veth peer name mimic-peer";
        if (!sh("ip link add t3 type veth peer name eth0 netns " + std::to_string(attacker)) ||
            !sh(in_tenant(attacker, std::string("ip link set eth0 address ") + victim_mac)) ||
            !(sh(in_tenant(attacker, "sh -c 'test $(ip -o link show eth0 | cut -d: -f1) = " +
                                         std::to_string(peer_index) + "'")) ||
              sh(in_tenant(attacker, mimic)))) {
            return std::string("cannot build the attacker");
        }
        tenant_namespace victims, attackers;
        std::string error;
        if (!tenant_namespace::veth_peer("vnet:iface=t1", victims, error)) {
            return "victim's: " + error;
        }
        if (!tenant_namespace::veth_peer("net_af_packet3,iface=t3,framesz=2048", attackers,
                                         error)) {
            return "attacker's: " + error;
        }
        return who(victims, victim, attacker) + " " + who(attackers, victim, attacker);
    });
    EXPECT_EQ(verdict, "victim attacker");
}

TEST(TenantNamespace, APortThatIsNoVethOrWhosePeerIsOnTheHostHasNoNamespaceToBeFoundIn) {
    const std::string verdict = on_a_host_of_its_own([](std::vector<pid_t>&) {
        if (!sh("ip link add d0 type bridge") || !sh("ip link add v0 type veth peer name v1")) {
            return std::string("cannot build the host");
        }
        std::string result;
        for (const char* port :
             {"vnet:iface=d0", "vnet:iface=v0", "vnet:iface=nothing", "net_memif0,role=server"}) {
            tenant_namespace ns;
            std::string error;
            result += tenant_namespace::veth_peer(port, ns, error) ? "found;" : error + ";";
        }
        return result;
    });
    EXPECT_NE(verdict.find("d0 is not a veth"), std::string::npos) << verdict;
    EXPECT_NE(verdict.find("the peer of veth v0 is in jakirod's own namespace"), std::string::npos)
        << verdict;
    EXPECT_NE(verdict.find("no interface nothing"), std::string::npos) << verdict;
    EXPECT_NE(verdict.find("'net_memif0,role=server': no veth named"), std::string::npos)
        << verdict;
    EXPECT_EQ(verdict.find("found"), std::string::npos) << verdict;
}

}  // namespace
}  // namespace jakiro::verbs
