/*
 * The only code that sees nDPI's ABI. nDPI's structs (the detection module,
 * ndpi_flow_struct, ndpi_protocol returned by value) change between
 * releases; Rust sees opaque pointers and plain integers only.
 *
 * Written against libndpi 4.2 (Debian 12).
 */
#include <stdint.h>
#include <string.h>

#include "ndpi_api.h"

/* Error codes of fy_ndpi_new, mirrored in src/lib.rs. */
#define FY_ERR_INIT 1
#define FY_ERR_PROTOCOLS_FILE 2

struct fy_ndpi {
	struct ndpi_detection_module_struct *mod;
};

struct fy_ndpi *fy_ndpi_new(const char *custom_protocols_path, int *err)
{
	struct fy_ndpi *n = ndpi_calloc(1, sizeof(*n));
	NDPI_PROTOCOL_BITMASK all;

	if (n == NULL) {
		*err = FY_ERR_INIT;
		return NULL;
	}
	n->mod = ndpi_init_detection_module(ndpi_no_prefs);
	if (n->mod == NULL) {
		ndpi_free(n);
		*err = FY_ERR_INIT;
		return NULL;
	}
	NDPI_BITMASK_SET_ALL(all);
	ndpi_set_protocol_detection_bitmask2(n->mod, &all);
	/* 4.2 returns -1 only when it cannot open the file (or is out of
	 * memory); bad rules are skipped silently, hence the check in Rust. */
	if (custom_protocols_path != NULL &&
	    ndpi_load_protocols_file(n->mod, custom_protocols_path) != 0) {
		ndpi_exit_detection_module(n->mod);
		ndpi_free(n);
		*err = FY_ERR_PROTOCOLS_FILE;
		return NULL;
	}
	ndpi_finalize_initialization(n->mod);
	return n;
}

void fy_ndpi_free(struct fy_ndpi *n)
{
	if (n != NULL) {
		ndpi_exit_detection_module(n->mod);
		ndpi_free(n);
	}
}

struct ndpi_flow_struct *fy_flow_new(void)
{
	struct ndpi_flow_struct *f = ndpi_flow_malloc(SIZEOF_FLOW_STRUCT);

	/* nDPI requires a zeroed flow and does not zero it itself. */
	if (f != NULL)
		memset(f, 0, SIZEOF_FLOW_STRUCT);
	return f;
}

void fy_flow_free(struct ndpi_flow_struct *f)
{
	ndpi_free_flow(f);
}

static void fy_split(ndpi_protocol p, uint16_t *master, uint16_t *app)
{
	*master = p.master_protocol;
	*app = p.app_protocol;
}

void fy_ndpi_giveup(struct fy_ndpi *n, struct ndpi_flow_struct *f,
		    uint16_t *master, uint16_t *app)
{
	uint8_t guessed;

	/* Guessing (by port, by IP) is what ndpiReader does by default. */
	fy_split(ndpi_detection_giveup(n->mod, f, 1, &guessed), master, app);
}

/*
 * Returns 1 when the result is final: a protocol was found, or nDPI will
 * not dissect this flow any further (then the result is giveup's guess).
 * A found protocol counts as final even when ndpi_extra_dissection_possible()
 * says more packets would add metadata (HTTP response code, TLS
 * certificate): the protocol id does not change, and the id is all we use.
 */
int fy_ndpi_process(struct fy_ndpi *n, struct ndpi_flow_struct *f,
		    const uint8_t *ip_packet, uint16_t len, uint64_t time_ms,
		    uint16_t *master, uint16_t *app)
{
	ndpi_protocol p = ndpi_detection_process_packet(n->mod, f, ip_packet, len, time_ms);

	fy_split(p, master, app);
	if (*master != NDPI_PROTOCOL_UNKNOWN || *app != NDPI_PROTOCOL_UNKNOWN)
		return 1;
	/* After NDPI_MAX_NUM_PKTS_PER_FLOW_TO_DISSECT packets, or once it
	 * marked the flow fail_with_unknown, process_packet returns at once. */
	if (f->fail_with_unknown || f->num_processed_pkts >= NDPI_MAX_NUM_PKTS_PER_FLOW_TO_DISSECT) {
		fy_ndpi_giveup(n, f, master, app);
		return 1;
	}
	return 0;
}

const char *fy_ndpi_proto_name(struct fy_ndpi *n, uint16_t id)
{
	/* Out-of-range ids map to "Unknown"; never NULL. */
	return ndpi_get_proto_name(n->mod, id);
}

int fy_ndpi_proto_id(struct fy_ndpi *n, const char *name)
{
	/* Case-insensitive; covers custom protocols. 4.2 takes a non-const
	 * pointer but only reads it. Returns -1 when not found. */
	return ndpi_get_protocol_id(n->mod, (char *)name);
}
