// libjakiro_verbs.so as a program sees it: it exports the whole public libibverbs 44 API,
// every verb that is not built fails cleanly (never a crash, even on NULL objects), and the
// pure helpers answer exactly what libibverbs answers.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#ifndef JAKIRO_VERBS_LIB
#error "JAKIRO_VERBS_LIB must name the built libjakiro_verbs.so"
#endif

namespace {

// objdump -T libibverbs.so.1 (rdma-core 44) | grep -v PRIVATE: every exported function, plus
// ibv_query_gid_type (IBVERBS_PRIVATE, but ibv_devinfo imports it).
const char* const libibverbs_api[] = {
    "_ibv_query_gid_ex",
    "_ibv_query_gid_table",
    "ibv_ack_async_event",
    "ibv_ack_cq_events",
    "ibv_alloc_pd",
    "ibv_attach_mcast",
    "ibv_close_device",
    "ibv_copy_ah_attr_from_kern",
    "ibv_copy_path_rec_from_kern",
    "ibv_copy_path_rec_to_kern",
    "ibv_copy_qp_attr_from_kern",
    "ibv_create_ah",
    "ibv_create_ah_from_wc",
    "ibv_create_comp_channel",
    "ibv_create_cq",
    "ibv_create_qp",
    "ibv_create_srq",
    "ibv_dealloc_pd",
    "ibv_dereg_mr",
    "ibv_destroy_ah",
    "ibv_destroy_comp_channel",
    "ibv_destroy_cq",
    "ibv_destroy_qp",
    "ibv_destroy_srq",
    "ibv_detach_mcast",
    "ibv_dofork_range",
    "ibv_dontfork_range",
    "ibv_event_type_str",
    "ibv_fork_init",
    "ibv_free_device_list",
    "ibv_get_async_event",
    "ibv_get_cq_event",
    "ibv_get_device_guid",
    "ibv_get_device_index",
    "ibv_get_device_list",
    "ibv_get_device_name",
    "ibv_get_pkey_index",
    "ibv_get_sysfs_path",
    "ibv_import_device",
    "ibv_import_dm",
    "ibv_import_mr",
    "ibv_import_pd",
    "ibv_init_ah_from_wc",
    "ibv_is_fork_initialized",
    "ibv_modify_qp",
    "ibv_modify_srq",
    "ibv_node_type_str",
    "ibv_open_device",
    "ibv_port_state_str",
    "ibv_qp_to_qp_ex",
    "ibv_query_device",
    "ibv_query_ece",
    "ibv_query_gid",
    "ibv_query_gid_type",
    "ibv_query_pkey",
    "ibv_query_port",
    "ibv_query_qp",
    "ibv_query_qp_data_in_order",
    "ibv_query_srq",
    "ibv_rate_to_mbps",
    "ibv_rate_to_mult",
    "ibv_read_sysfs_file",
    "ibv_reg_dmabuf_mr",
    "ibv_reg_mr",
    "ibv_reg_mr_iova",
    "ibv_reg_mr_iova2",
    "ibv_register_driver",
    "ibv_rereg_mr",
    "ibv_resize_cq",
    "ibv_resolve_eth_l2_from_gid",
    "ibv_set_ece",
    "ibv_unimport_dm",
    "ibv_unimport_mr",
    "ibv_unimport_pd",
    "ibv_wc_status_str",
    "mbps_to_ibv_rate",
    "mult_to_ibv_rate",
};

// Zeroed room for another library's object: a provider embeds the public struct in a larger
// one of its own, so a magic number past the public part reads (zeroed) memory.
struct foreign_storage {
    alignas(64) unsigned char bytes[2048] = {};
    template <typename T>
    T& as() {
        static_assert(sizeof(T) <= sizeof(bytes));
        return *reinterpret_cast<T*>(bytes);
    }
};

class Shim : public testing::Test {
  protected:
    static void SetUpTestSuite() {
        shim = dlopen(JAKIRO_VERBS_LIB, RTLD_NOW | RTLD_LOCAL);
        ASSERT_NE(shim, nullptr) << dlerror();
        // The real library, for its pure helpers only; absent on a machine without rdma-core.
        real = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    }

    template <typename F>
    static F* from(void* lib, const char* name) {
        return reinterpret_cast<F*>(dlsym(lib, name));
    }
    template <typename F>
    static F* shim_fn(const char* name) {
        auto* f = from<F>(shim, name);
        EXPECT_NE(f, nullptr) << name;
        return f;
    }

    static inline void* shim = nullptr;
    static inline void* real = nullptr;
};

TEST_F(Shim, ExportsEveryPublicLibibverbsFunctionFromItself) {
    Dl_info self{};
    ASSERT_NE(dladdr(dlsym(shim, "ibv_open_device"), &self), 0);
    for (const char* name : libibverbs_api) {
        void* f = dlsym(shim, name);
        ASSERT_NE(f, nullptr) << name << " is not exported";
        Dl_info info{};
        ASSERT_NE(dladdr(f, &info), 0);
        EXPECT_STREQ(info.dli_fname, self.dli_fname) << name << " resolves outside the shim";
    }
}

TEST_F(Shim, UnbuiltConstructorsReturnNullWithEopnotsupp) {
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_mr*(ibv_pd*, uint64_t, size_t, uint64_t, int, int)>("ibv_reg_dmabuf_mr")(
                  nullptr, 0, 4096, 0, -1, 0),
              nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(shim_fn<ibv_ah*(ibv_pd*, ibv_ah_attr*)>("ibv_create_ah")(nullptr, nullptr), nullptr);
    EXPECT_EQ(shim_fn<ibv_context*(int)>("ibv_import_device")(3), nullptr);
    EXPECT_EQ(shim_fn<ibv_qp_ex*(ibv_qp*)>("ibv_qp_to_qp_ex")(nullptr), nullptr);
}

TEST_F(Shim, ImportingAContextOrItsObjectsIsRefusedWithEopnotsupp) {
    // A vNIC's context has no kernel command descriptor another process could import.
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_context*(int)>("ibv_import_device")(3), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_pd*(ibv_context*, uint32_t)>("ibv_import_pd")(nullptr, 1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_mr*(ibv_pd*, uint32_t)>("ibv_import_mr")(nullptr, 1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_dm*(ibv_context*, uint32_t)>("ibv_import_dm")(nullptr, 1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Shim, UnbuiltDestructorsAndModifiersReturnEopnotsupp) {
    EXPECT_EQ(shim_fn<int(ibv_cq*, int)>("ibv_resize_cq")(nullptr, 4), EINVAL)
        << "built: a NULL CQ is not ours";
    EXPECT_EQ(shim_fn<int(ibv_ah*)>("ibv_destroy_ah")(nullptr), EINVAL) << "not an AH of ours";
    EXPECT_EQ(
        shim_fn<int(ibv_qp*, const ibv_gid*, uint16_t)>("ibv_attach_mcast")(nullptr, nullptr, 0),
        EOPNOTSUPP);
}

TEST_F(Shim, SrqVerbsRefuseNullObjects) {
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_srq*(ibv_pd*, ibv_srq_init_attr*)>("ibv_create_srq")(nullptr, nullptr),
              nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_srq*)>("ibv_destroy_srq")(nullptr), EINVAL);
    ibv_srq_attr attr{};
    EXPECT_EQ(shim_fn<int(ibv_srq*, ibv_srq_attr*)>("ibv_query_srq")(nullptr, &attr), EINVAL);
    EXPECT_EQ(
        shim_fn<int(ibv_srq*, ibv_srq_attr*, int)>("ibv_modify_srq")(nullptr, &attr, IBV_SRQ_LIMIT),
        EINVAL);
}

TEST_F(Shim, ReregMrOfNoMrIsInvalidInput) {
    errno = 0;
    EXPECT_EQ(shim_fn<int(ibv_mr*, int, ibv_pd*, void*, size_t, int)>("ibv_rereg_mr")(
                  nullptr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, 0),
              IBV_REREG_MR_ERR_INPUT);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Shim, ResourceVerbsRefuseNullAndForeignObjects) {
    // Built verbs check that an object is the shim's before touching it: NULL, and objects
    // of another library (zeroed here: no magic), get EINVAL instead of a crash.
    foreign_storage storage[6];
    auto& foreign_context = storage[0].as<ibv_context>();
    auto& foreign_pd = storage[1].as<ibv_pd>();
    auto& foreign_cq = storage[2].as<ibv_cq>();
    auto& foreign_mr = storage[3].as<ibv_mr>();
    auto& foreign_channel = storage[4].as<ibv_comp_channel>();
    auto& foreign_qp = storage[5].as<ibv_qp>();
    for (ibv_context* c : {static_cast<ibv_context*>(nullptr), &foreign_context}) {
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_pd*(ibv_context*)>("ibv_alloc_pd")(c), nullptr);
        EXPECT_EQ(errno, EINVAL);
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_cq*(ibv_context*, int, void*, ibv_comp_channel*, int)>(
                      "ibv_create_cq")(c, 16, nullptr, nullptr, 0),
                  nullptr);
        EXPECT_EQ(errno, EINVAL);
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_comp_channel*(ibv_context*)>("ibv_create_comp_channel")(c), nullptr);
        EXPECT_EQ(errno, EINVAL);
    }
    char buffer[64];
    for (ibv_pd* pd : {static_cast<ibv_pd*>(nullptr), &foreign_pd}) {
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_mr*(ibv_pd*, void*, size_t, int)>("ibv_reg_mr")(pd, buffer, 64, 0),
                  nullptr);
        EXPECT_EQ(errno, EINVAL);
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_mr*(ibv_pd*, void*, size_t, uint64_t, unsigned)>("ibv_reg_mr_iova2")(
                      pd, buffer, 64, 0, 0),
                  nullptr);
        EXPECT_EQ(errno, EINVAL);
        EXPECT_EQ(shim_fn<int(ibv_pd*)>("ibv_dealloc_pd")(pd), EINVAL);
        ibv_qp_init_attr init{};
        init.qp_type = IBV_QPT_RC;
        errno = 0;
        EXPECT_EQ(shim_fn<ibv_qp*(ibv_pd*, ibv_qp_init_attr*)>("ibv_create_qp")(pd, &init),
                  nullptr);
        EXPECT_EQ(errno, EINVAL);
    }
    ibv_qp_attr qp_attr{};
    ibv_qp_init_attr qp_init{};
    for (ibv_qp* qp : {static_cast<ibv_qp*>(nullptr), &foreign_qp}) {
        EXPECT_EQ(
            shim_fn<int(ibv_qp*, ibv_qp_attr*, int)>("ibv_modify_qp")(qp, &qp_attr, IBV_QP_STATE),
            EINVAL);
        EXPECT_EQ(shim_fn<int(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*)>("ibv_query_qp")(
                      qp, &qp_attr, IBV_QP_STATE, &qp_init),
                  EINVAL);
        EXPECT_EQ(shim_fn<int(ibv_qp*)>("ibv_destroy_qp")(qp), EINVAL);
    }
    EXPECT_EQ(shim_fn<int(ibv_mr*)>("ibv_dereg_mr")(nullptr), EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_mr*)>("ibv_dereg_mr")(&foreign_mr), EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_cq*)>("ibv_destroy_cq")(nullptr), EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_cq*)>("ibv_destroy_cq")(&foreign_cq), EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_comp_channel*)>("ibv_destroy_comp_channel")(nullptr), EINVAL);
    EXPECT_EQ(shim_fn<int(ibv_comp_channel*)>("ibv_destroy_comp_channel")(&foreign_channel),
              EINVAL);
    errno = 0;
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    EXPECT_EQ(shim_fn<int(ibv_comp_channel*, ibv_cq**, void**)>("ibv_get_cq_event")(
                  &foreign_channel, &cq, &cq_context),
              -1);
    EXPECT_EQ(errno, EINVAL);
    shim_fn<void(ibv_cq*, unsigned)>("ibv_ack_cq_events")(nullptr, 1);
    shim_fn<void(ibv_cq*, unsigned)>("ibv_ack_cq_events")(&foreign_cq, 1);
}

TEST_F(Shim, ForeignObjectsAreRefusedNotDereferencedBeyondTheirMagic) {
    // An ibv_device / ibv_context that is not the shim's (zeroed: no magic, no abi_compat).
    // A provider's objects embed the public struct in a larger one, as ours do; zeroed
    // storage of that size stands in, so checking the magic reads zeros.
    foreign_storage device_storage, context_storage;
    auto& foreign_device = device_storage.as<ibv_device>();
    auto& foreign_context = context_storage.as<ibv_context>();
    errno = 0;
    EXPECT_EQ(shim_fn<ibv_context*(ibv_device*)>("ibv_open_device")(&foreign_device), nullptr);
    EXPECT_EQ(errno, ENODEV);
    EXPECT_EQ(shim_fn<const char*(ibv_device*)>("ibv_get_device_name")(nullptr), nullptr);
    EXPECT_EQ(shim_fn<int(ibv_context*)>("ibv_close_device")(&foreign_context), EINVAL);
    ibv_device_attr attr;
    EXPECT_EQ(
        shim_fn<int(ibv_context*, ibv_device_attr*)>("ibv_query_device")(&foreign_context, &attr),
        EINVAL);
    ibv_async_event event;
    EXPECT_EQ(shim_fn<int(ibv_context*, ibv_async_event*)>("ibv_get_async_event")(&foreign_context,
                                                                                  &event),
              -1);
}

TEST_F(Shim, DeviceListIsEmptyWithoutAReachableJakirod) {
    setenv("JAKIRO_VERBS_SOCKET", "/nonexistent/jakiro.sock", 1);
    int n = -1;
    auto** list = shim_fn<ibv_device**(int*)>("ibv_get_device_list")(&n);
    ASSERT_NE(list, nullptr) << "an empty list, not an error";
    EXPECT_EQ(n, 0);
    EXPECT_EQ(list[0], nullptr);
    shim_fn<void(ibv_device**)>("ibv_free_device_list")(list);
    unsetenv("JAKIRO_VERBS_SOCKET");
}

// ibv_fork_init() cannot be undone, so it is called in a child: this process (and the tests
// after this one) keeps forking the ordinary way.
TEST_F(Shim, ForkInitSucceedsAndIsRemembered) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int bad = 0;
        bad |= shim_fn<ibv_fork_status()>("ibv_is_fork_initialized")() == IBV_FORK_DISABLED ? 0 : 1;
        bad |= shim_fn<int()>("ibv_fork_init")() == 0 ? 0 : 2;
        bad |= shim_fn<ibv_fork_status()>("ibv_is_fork_initialized")() == IBV_FORK_ENABLED ? 0 : 4;
        _exit(bad);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0)
        << "1: initialized before the call, 2: the call failed, 4: not initialized after it";
}

TEST_F(Shim, NamesMatchLibibverbs) {
    if (real == nullptr) {
        GTEST_SKIP() << "libibverbs.so.1 not installed";
    }
    struct str_fn {
        const char* name;
        int first, last;
    };
    for (const auto& f :
         {str_fn{"ibv_node_type_str", -2, 12}, str_fn{"ibv_port_state_str", -2, 9},
          str_fn{"ibv_event_type_str", -2, 30}, str_fn{"ibv_wc_status_str", -2, 30}}) {
        auto* mine = from<const char*(int)>(shim, f.name);
        auto* theirs = from<const char*(int)>(real, f.name);
        ASSERT_NE(theirs, nullptr) << f.name;
        for (int v = f.first; v <= f.last; ++v) {
            EXPECT_STREQ(mine(v), theirs(v)) << f.name << "(" << v << ")";
        }
    }
}

TEST_F(Shim, RateConversionsMatchLibibverbs) {
    if (real == nullptr) {
        GTEST_SKIP() << "libibverbs.so.1 not installed";
    }
    for (const char* name : {"ibv_rate_to_mult", "ibv_rate_to_mbps"}) {
        auto* mine = from<int(int)>(shim, name);
        auto* theirs = from<int(int)>(real, name);
        for (int rate = -1; rate <= 30; ++rate) {
            EXPECT_EQ(mine(rate), theirs(rate)) << name << "(" << rate << ")";
        }
    }
    // The inverses over every value the forward functions produce, and some they do not.
    auto* to_mult = from<int(int)>(real, "ibv_rate_to_mult");
    auto* to_mbps = from<int(int)>(real, "ibv_rate_to_mbps");
    for (const char* name : {"mult_to_ibv_rate", "mbps_to_ibv_rate"}) {
        auto* mine = from<int(int)>(shim, name);
        auto* theirs = from<int(int)>(real, name);
        for (int rate = 0; rate <= 30; ++rate) {
            const int v = std::string(name) == "mult_to_ibv_rate" ? to_mult(rate) : to_mbps(rate);
            EXPECT_EQ(mine(v), theirs(v)) << name << "(" << v << ")";
        }
        for (int v : {0, 3, 5, 7, 99, 1000, 99999}) {
            EXPECT_EQ(mine(v), theirs(v)) << name << "(" << v << ")";
        }
    }
}

TEST_F(Shim, SysfsHelpersBehaveLikeLibibverbs) {
    EXPECT_STREQ(shim_fn<const char*()>("ibv_get_sysfs_path")(), "/sys");
    char buf[64];
    auto* read_file = shim_fn<int(const char*, const char*, char*, size_t)>("ibv_read_sysfs_file");
    EXPECT_EQ(read_file("/sys/class/infiniband/jakiro_t1", "board_id", buf, sizeof(buf)), -1);
    EXPECT_GT(read_file("/proc/sys/kernel", "ostype", buf, sizeof(buf)), 0);
    EXPECT_STREQ(buf, "Linux") << "trailing newline removed";
}

}  // namespace
