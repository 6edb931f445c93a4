//! Switches for the corrections to Algorithm 1 listed in `docs/algorithm.md`, so that tests
//! can show the checker catching each defect. Only the `rule-switches` feature can turn a rule off.

/// Which corrections to Algorithm 1 are in force. All are on by default and in every build
/// without the `rule-switches` cargo feature, which exists for the simulator's self-test only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rules {
    /// Rule 1: the first send to a destination requests slots.
    pub first_send_requests_slots: bool,
    /// Rule 2: the token is recorded before the frontier `l` is computed.
    pub token_before_frontier: bool,
    /// Rule 3: a token keeps the incarnation it was made under; envelopes of an old
    /// incarnation are discarded.
    pub token_keeps_incarnation: bool,
    /// Rule 4: a token for a record that does not exist is acknowledged.
    pub ack_without_record: bool,
    /// Rule 5: SLOTS for no record raises the clock before the waiver is sent.
    pub raise_clock_on_orphan_slots: bool,
    /// Rule 6: requests beyond `max_slots_request`, records beyond the caps, and slots beyond
    /// `max_slots_per_record` are refused.
    pub bounded_input: bool,
    /// Rule 7: receiver records holding slots probe a silent sender.
    pub receiver_probe: bool,
    /// Beyond the paper (the gap behind rule 8, see `docs/algorithm.md`): a TOKEN for an incarnation lost in a
    /// restart is answered DOUBT, and one evicted unused is answered RETRY, instead of the
    /// rule-4 ACK that would acknowledge a message never delivered.
    pub doubt_lost_incarnations: bool,
    /// Hardening against forged frames (what plaintext mode relies on; harmless when
    /// sealed): a REQSLOTS whose frontier `l` lies above its own `s`, or above every slot
    /// its record ever held, is refused (it would drop slots tokens are in flight for); a
    /// TOKEN for an incarnation this node never issued gets no verdict; a RETRY for an
    /// incarnation the receiver already acknowledged tokens of, and any verdict for a token
    /// that never left, are ignored (neither can be true).
    pub plausible_input: bool,
    /// A receiver record nothing was ever delivered into stops probing after
    /// `MAX_UNPROVEN_PROBES` unanswered probes and is evicted (its tokens, if any come, get
    /// RETRY), so a record a peer created without ever using it does not probe forever.
    pub unproven_probe_limit: bool,
    /// Beyond the notes: a delivered TOKEN is acknowledged only once the embedding reports
    /// that the application took it (`Node::handle_taken`); a duplicate of a delivery not
    /// yet taken gets no answer, and the record stays until every delivery is taken. Off,
    /// the ACK leaves on delivery, so a message lost in the receiver's buffer (a crash
    /// before the application read it) is acknowledged all the same.
    pub ack_on_take: bool,
    /// Beyond the notes: a message given up (`Node::abandon`) after a copy of it left is in
    /// doubt; only one that never left is reported not delivered. Off, every abandoned
    /// message is reported not delivered, although a copy in flight may still arrive.
    pub deadline_doubts_sent_tokens: bool,
    /// Beyond the notes (deadlines after a change of datagram sizes): a token remembers
    /// that a whole copy of its message (one TOKEN, or every byte in FRAGs) ever left, and a
    /// message given up after that is in doubt, however its retransmissions were cut up
    /// since (datagrams shrunk by the deaf schedule or the black-hole fallback, fragments
    /// that never left). Off, a message whose present fragments did not all leave is
    /// reported not delivered, although an earlier whole copy may have been delivered.
    pub deadline_remembers_whole_copies: bool,
    /// Beyond the paper (large messages): a receiver stores a partial message only within
    /// the reassembly memory it granted its sender (CREDIT), and a sender starts a message
    /// of several fragments only within the credit it holds, waiting otherwise. Off, both
    /// go ahead without credit, and nothing but its senders bounds a receiver's memory.
    pub fragments_need_credit: bool,
    /// Beyond the paper (deaf paths): a peer sent to for `2 * max_rto` without anything heard
    /// from it gets one base-size datagram at a time on an exponentially backed-off schedule
    /// (`silence.rs`), and an MTU probe that expired unheard is not followed by another
    /// until the peer is heard from (`mtud.rs`). Off, what each timer wants goes out, and a
    /// path that fails one way takes whatever the node's timers and probes send into it.
    pub deaf_backoff: bool,
    /// Beyond the paper (open groups): a full receiver-record table with no unproven record
    /// to evict evicts the record whose source has been silent longest (at least
    /// `probe_interval`, no delivery waiting for the application), and a proven record whose
    /// source stayed silent through `MAX_UNPROVEN_PROBES` probes is evicted the same way.
    /// Sealed nodes only (a plaintext sender refuses the RETRY this may bring). Off, proven
    /// records stay and probe until their slots are filled or waived, and a table full of
    /// them refuses every new source.
    pub evict_silent_records: bool,
    /// With `evict_silent_records`: an evicted proven record's free slots are remembered,
    /// so a late TOKEN for one gets RETRY, for a filled one ACK, anything else DOUBT
    /// (`eviction.rs`). Off, the incarnation is forgotten as a spent record would be, and a
    /// TOKEN for a free slot gets the rule-4 ACK: a message acknowledged and never delivered.
    pub remember_evicted_slots: bool,
    /// Beyond the paper (more sources than records): a node does not evict an unproven
    /// receiver record whose source was heard lately (a sealed node within
    /// `probe_interval`, a plaintext one, whose unproven records may be forgers', within
    /// two round trips to that source, `initial_rtt` before one is measured); a new
    /// source then waits (its REQSLOTS is refused, `too_many_records`, and sent again on
    /// its timer) until a record is used or goes quiet. Off, the oldest unproven record
    /// goes however fresh: with more sources asking than records, each record is evicted by
    /// the next source's REQSLOTS before its TOKEN arrives, every TOKEN gets RETRY and asks
    /// again, and nothing is ever delivered (a livelock of RETRYs at the link's speed; in
    /// plaintext `exon-sim --plaintext --nodes 3 --record-cap 1 --rpc`).
    pub fresh_records_kept: bool,
    /// Beyond the paper (large messages): a verdict frame that settles messages in progress
    /// gives their reassembly credit back and tries again the messages waiting for it, as a
    /// GOT that makes a message whole does. Off, only a GOT or a CREDIT tries them: when the
    /// verdict came first (reordering) and the grant had answered in full, they waited for
    /// good with nothing in flight and no timer (`exon-sim --nodes 2 --reorder 0.2
    /// --jitter-ms 20 --payload 100000`, found by `scripts/sim-campaign.py`).
    pub credit_return_resumes: bool,
    /// Beyond the paper (large messages): a message given up (`Node::abandon`, a deadline)
    /// after some of its fragments left owes its receiver a frontier notice, REQSLOTS(s, 0,
    /// l), once the frontier passes its slot: the receiver drops the partial and its
    /// reassembly memory at once. Off, the frontier travels only with the next request for
    /// slots, and a sender with no more to ask for leaves the partial to the receiver's
    /// reassembly timeout (30 s), holding back its next large message as long.
    pub abandon_tells_frontier: bool,
    /// Beyond the paper (keyed sends, `docs/durability.md`): a journal that may have
    /// forgotten keys it had accepted (found damaged, or new for a node that ran before)
    /// refuses keyed sends to a destination until the application settles its keys
    /// (`SendError::KeysForgotten`, `Node::settle_keys`). Off, a row sent again after such
    /// a restart is accepted as a new message, and delivered a second time if the first
    /// copy had arrived.
    pub forgotten_keys_refused: bool,
    /// Beyond the paper (large messages): a sender starts another fragmented message only
    /// while the charges of those in progress stay within what the path moves (the
    /// bandwidth estimate) in a quarter of the reassembly timeout; one always may. Off,
    /// every message the reassembly credit covers (up to 16 MiB) is in progress at once,
    /// each at its share of the path: on a path whose estimate fell (20 % loss and 20 ms of
    /// jitter), each took longer than the receiver keeps a partial (30 s), every partial
    /// expired before it was whole, and nothing was delivered for good.
    pub progress_within_reassembly_timeout: bool,
    /// Beyond the paper (large messages on a path that slows down): the fragmented messages
    /// in progress get fragments oldest first (in the order they were charged, each at the
    /// charge it holds: a message given back and charged again counts once), only those
    /// whose charges fit the budget of `progress_within_reassembly_timeout` (the oldest
    /// always); the others wait as a message not yet started does. Off, messages started
    /// while the path moved more took turns with the older ones when it slowed: NewReno's
    /// rate fell tenfold at 20 % loss with about 170 messages of 100 000 bytes in progress,
    /// each got a fragment a few times a minute, every partial expired before it was whole,
    /// and no ACK came for the rest of the run (`exon-sim --nodes 2 --messages 600 --loss
    /// 0.2 --dup 0.1 --burst 0.05 --partitions 3 --restarts 1 --payload 100000 --record-cap
    /// 1 --congestion new-reno --durable --journal-loss 1 --abandon-crash 3 --seed 872294999
    /// --settle-s 3000`, found by `scripts/sim-campaign.py`; since `progress_measured`
    /// starts fewer messages when the rate falls, that run fails only with both off).
    pub progress_oldest_first: bool,
    /// Beyond the paper (large messages on a path that holds datagrams back): among the
    /// messages in progress served oldest first (`progress_oldest_first`), one whose every
    /// byte has left (in flight, or held by the receiver) keeps no newer one waiting; the
    /// newer ones waiting are tried again when its last byte leaves, and it takes its place
    /// again as soon as a byte of it is to be sent again. Off, a message all in flight held
    /// the path for the ones behind it until it was whole: with half the datagrams held up
    /// to 5 s, the budget of `progress_measured` (what the receiver came to hold) fell with
    /// what that one message let through, and the sender sent about four datagrams a
    /// second on a 20 MB/s path: 322 of 500 messages of 100 000 bytes arrived in 1 500 s
    /// (`large_messages_held_for_seconds_all_arrive`, phase 5, in `exon/tests/core`).
    pub progress_past_all_sent: bool,
    /// Beyond the paper (large messages on a path that reorders or loses much): once
    /// fragmented messages have been in progress for a quarter of the reassembly timeout
    /// without a break, the budget of `progress_within_reassembly_timeout` is at most twice
    /// the bytes the receiver came to hold (GOT) over the last quarter, whatever the
    /// controller's bandwidth estimate says. Off, the estimate alone set it: with half the
    /// datagrams held up to 5 s, most of what moved was sent again, BBR's estimate stood
    /// about 25 times above what the receiver came to hold, some 45 messages of 100 000
    /// bytes were in progress in turn, every partial expired (30 s) before its turn came
    /// again, and 106 of 500 messages were never delivered (`exon-sim --nodes 2 --messages
    /// 500 --reorder 0.5 --reorder-max-delay-ms 5000 --payload 100000 --rate 20000000
    /// --latency-ms 1 --seed 1`, found by `scripts/sim-campaign.py`).
    pub progress_measured: bool,
    /// Beyond the paper (paths that hold datagrams back for many round trips): BBR's
    /// window keeps an allowance for the data the path holds back, grown by a quarter of
    /// the round's length (the minimum RTT at least) each round in ProbeBw that filled the
    /// window with no queue at the bottleneck, up to loss detection's reordering window,
    /// halved by a round with a queue and cleared by a congestion cut. Off, the window of
    /// two products (at the minimum RTT) bound the sender while half its datagrams were
    /// held for up to 100 ms, and the estimate, made of what that window delivered,
    /// settled ever lower: 500 messages of 100 000 bytes between three nodes 5 ms apart
    /// took 45 s of virtual time where 50 ms holds take 0.6 s (`exon-sim --nodes 3
    /// --messages 500 --payload 100000 --reorder 0.5 --reorder-max-delay-ms 100`).
    pub reordering_allowance: bool,
    /// Beyond the paper (durable mode, early tokens): a receiver record that holds no free
    /// slot but early deliveries parked for its sender's word (STORED, or a frontier past
    /// them) probes that sender as a record with free slots does, and its answer (a
    /// waiver, or a request whose frontier passes them) releases or drops them. Off, a
    /// sender that restarted with its journal lost and had nothing more to send never
    /// spoke again: the record and its parked delivery stayed for good (`exon-sim
    /// --journal-loss 1 --deadline-ms 100 --take-delay-ms 200 ...`, found by
    /// `scripts/sim-campaign.py`).
    pub parked_early_probes: bool,
    /// Beyond the paper (late duplicates): a DOUBT, RETRY or LOST for slots that lie wholly
    /// below the sender's own frontier is stale (the sender holds no token and no envelope
    /// there, so it settles nothing) and is ignored: it neither drops the incarnation's
    /// envelopes and reassembly credit nor queues messages again. Off, each such verdict,
    /// drawn by a late duplicate of a token settled long ago (`doubt_below_forgotten` in a
    /// live record), makes the sender start over in that incarnation, and with large
    /// messages and a duplicating path it never finishes one.
    pub stale_verdicts_ignored: bool,
    /// Beyond the paper (large messages after a restart): a FRAG refused for want of credit
    /// is answered with the GOT of one partial the receiver holds for its sender, each in
    /// turn, and a GOT showing that the receiver holds part, not all, of a message the
    /// sender has not charged to its credit (one recovered from the journal, started by the
    /// node's life before) charges it, as the receiver did. Off, the sender counts less
    /// credit in use than its receiver: it starts
    /// messages the receiver refuses for want of memory, their refused first fragments are
    /// all that a window at its floor lets go, and the stream stalls until the partials
    /// expire (`reassembly_timeout`, 30 s): `exon-sim --nodes 2 --dup 0.02 --burst 0.05
    /// --payload 100000 --durable --restarts 1`, found by `scripts/sim-campaign.py`.
    pub got_charges_partials: bool,
    /// Beyond the paper (large messages on lossy paths): GOT is cumulative per partial, so
    /// a GOT that answers a fragment sent after the sender last learnt of new bytes, and
    /// lacks bytes it had told of, shows that the receiver dropped that partial (its
    /// reassembly timeout) and holds a new one: the sender forgets what it took as held
    /// and sends the rest again. Off, only a message taken as held whole was so reset: the
    /// bytes of a dropped partial stayed counted as held and were never sent again, each
    /// new partial expired in turn, and the message never arrived (`exon-sim --nodes 2
    /// --loss 0.2 --dup 0.1 --payload 20000 --durable --crash-mid-commit 1 --rpc
    /// --call-deadline-ms 1000 --seed 354539590`, found by `scripts/sim-campaign.py`).
    pub got_forgets_dropped_bytes: bool,
    /// Beyond the paper (deadlines): a message given up (`Node::abandon`) wakes its sender
    /// record when other messages are queued or in flight to the same peer: the window,
    /// credit or place at the head of the queue it held may now let them go. Off, a message
    /// given up while it held the window left the ones behind it with nothing in flight and
    /// no timer, each waiting for something else to wake the record (a probe, another send),
    /// and the last ones for ever: a durable channel's gap was never sent, its flow blocked
    /// (`exon-sim --channels 16 --deadline-ms 2000 --payload 100000 --loss 0.2 --durable ...
    /// --seed 994110734`, found by `scripts/sim-campaign.py`). It also asks for the slots
    /// the messages queued behind want: with a slot window of two, two messages given up
    /// in flight held every slot, and the one queued behind them never asked for any
    /// (`exon-sim --messages 500 --loss 0.1 --deadline-ms 2000 --channels 1 --window 2
    /// --envelope-target 2 --envelope-low 1 --seed 4`).
    pub abandon_wakes_sender: bool,
    /// Beyond the paper (floods of forgeries, `docs/security.md`): the datagram keys shared
    /// with each keyring member are derived once and kept while it is a member, outside the
    /// cache and without spending the key-agreement budget, so a forgery in a member's name
    /// costs one tag check. Off, members go through the cache and the budget like
    /// self-certifying peers, and a flood of such forgeries locks new members out.
    pub pin_member_keys: bool,
    /// Beyond the paper (floods of forgeries): an endpoint answers a datagram refused for
    /// want of key-agreement budget with a COOKIE_REPLY to its source address, and spends
    /// the separate vouched budget on datagrams that echo a valid cookie for their address,
    /// within a per-address limit. Off, no cookie is sent or honoured (the endpoint's rule;
    /// the core itself only keeps the budgets apart).
    pub address_cookies: bool,
    /// Beyond the paper (reordering, RACK-style): once a destination's acknowledgements show
    /// that its path reorders, loss detection stops counting datagrams and declares losses
    /// by time alone, with a reordering window that covers the lateness seen and widens with
    /// every loss found spurious (`loss.rs`). Off, a token is lost once 3 datagrams after it
    /// or 9/8 of the RTT have passed, and a path that reorders has its datagrams sent twice.
    pub reordering_window: bool,
    /// Beyond the paper (reordering): the congestion response to losses found spurious (the
    /// first acknowledgement of a token declared lost came before its retransmission could
    /// have been answered) is undone: BBR's in-flight cap, NewReno's halving. Off, every loss
    /// declared slows the sender down for good.
    pub spurious_undo: bool,
    /// Beyond the paper (loss that is the path's, not a queue's): BBR's delivery-rate
    /// samples are made up for the loss rate every recent stretch of 64 datagrams met (a
    /// queue that overflows now and then leaves stretches without loss), never above the
    /// rate their bytes were sent at. Off, a path that loses a fifth or more at random
    /// shrinks the bandwidth estimate round after round to the pacing floor.
    pub random_loss_made_up: bool,
    /// Beyond the paper (ACK compression): a receiver writes its receipt time (RECEIVED)
    /// before the verdicts, HELDs and GOTs it sends a peer, and a sender's delivery-rate
    /// samples span at least the receiver's receipt interval. Off, acknowledgements that
    /// queue behind other traffic on the way back and arrive bunched give samples above
    /// the rate the path delivered, and the bandwidth estimate climbs past the link.
    pub receipt_times: bool,
    /// Rule 8, its timing: a clock value is used only once the high-water mark covering it
    /// was reported stored (`handle_clock_stored`), not when the store was asked for. Off,
    /// the node counts a mark as stored as soon as it hands it out, and a crash between the
    /// write and its sync restarts it below values it already used.
    pub clock_waits_for_store: bool,
    /// Durable mode: a delivery reaches the application only once its `Delivered` record is
    /// stored (else a crash loses it from the journal and its retransmission is delivered
    /// again, unflagged).
    pub journal_before_delivery: bool,
    /// Durable mode: a take is acknowledged only once its `Taken` record is stored (else a
    /// crash redelivers a message its sender saw acknowledged).
    pub journal_before_ack: bool,
    /// Durable mode: a token goes out only once its slot is stored (`Assigned`; else a
    /// restarted sender sends it again in a fresh slot and it is delivered twice).
    pub journal_before_token: bool,
    /// Durable mode: a verdict is reported, and the frontier passes its slot, only once its
    /// `Resolved` record is stored (else a restarted sender resends a message its receiver
    /// has forgotten, which then takes it for new).
    pub journal_before_verdict: bool,
    /// Durable mode: a reply (`Node::reply`) and the take of the request it answers go to
    /// the journal in one record (`Replied`). Off, they are two records, `Taken` then
    /// `Accepted`, and a crash between them loses the reply of a request acknowledged as
    /// executed.
    pub reply_in_one_record: bool,
    /// Durable mode: a journal answers LOST (never delivered) only for incarnations it
    /// covers: those of this run, and those of earlier runs inside its `Covers` records (a
    /// journal records the clock it started at and the marks the clock reached); a new or
    /// replaced journal covers nothing made before it, so tokens of such incarnations get
    /// DOUBT; and no incarnation is made before the journal covers it. Off, every
    /// incarnation from before the restart is taken for covered, and a receiver restarted
    /// with a new journal delivers a second time what it delivered before.
    pub journal_covers_incarnations: bool,
    /// Durable mode: a message given up (`Node::abandon`) gets its verdict only once its
    /// `Resolved` record is stored (`Abandoned::Pending`, then `Event::NotDelivered` or
    /// `Event::InDoubt`). Off, `abandon` returns the verdict at once, and a crash before
    /// the record is stored recovers the message and sends it again: a message reported
    /// not delivered is delivered.
    pub deadline_verdict_after_record: bool,
    /// Durable mode: a `Resolved` record keeps the message's verdict until a `Reported`
    /// record says the application was handed it, and a restarted node reports every
    /// verdict its journal still holds. Off, a restarted node forgets them, and a crash
    /// between the record's sync and the report loses the verdict of a message the
    /// application was told was stored.
    pub report_stored_verdicts: bool,
    /// Ordered flows (the endpoint's rule, `docs/channels.md`): a flow's receiver
    /// advertises its window (`FlowConfig::channel_window`, `stream_window` and their
    /// bytes) when a sender's run starts, and the sender keeps to the smaller of its own
    /// window and the advertised one, one message at a time until it knows. Off, nothing is
    /// advertised and a sender keeps to its own window only.
    pub advertise_flow_window: bool,
    /// Ordered flows (the endpoint's rule): a message that arrives ahead of its turn is
    /// held untaken (so unacknowledged) until released in order, however far beyond the
    /// receiver's window. Off, one more than four receiver windows ahead is taken
    /// (acknowledged) and dropped, a stream's aborting it: with a sender's window larger
    /// than the receiver's, messages acknowledged never reach the application.
    pub hold_beyond_window: bool,
    /// Durable mode (the endpoint's rule, `docs/rpc.md`): a caller's requests recovered
    /// from its journal after a restart are registered again in its table of calls, under
    /// the call ids they had, so that their replies reach the recovered calls
    /// (`Endpoint::take_recovered_calls`). Off, they are still sent again and executed,
    /// but their replies find no call and are discarded.
    pub recover_calls: bool,
    /// Durable mode: a mark set with a send or a take (`Node::send_marked`,
    /// `Node::handle_taken_marked`) is written in the same record as the send or the take,
    /// so a crash keeps both or neither. Off, the mark is a record of its own written
    /// first: a crash between the two keeps a flow's position without the message or the
    /// take it goes with.
    pub mark_in_one_record: bool,
    /// Durable mode (the endpoint's rule, `docs/channels.md`): ordered channels keep their
    /// positions in the journal (the sender's run and next number with each message, the
    /// receiver's next number due with each take) and go on from them after a restart of
    /// either side. Off, they start over as on an endpoint that is not durable: a restarted
    /// receiver releases its senders' messages out of order (`Kind::Unordered`), a
    /// restarted sender starts a new run.
    pub durable_flows: bool,
    /// Durable mode (`Node::send_held`, the endpoint's calls, `docs/rpc.md`): a caller's
    /// request stays in its journal after its acknowledgement (`AcceptedHeld`, `Held`)
    /// until the endpoint releases it, when the call takes its reply (`TakenReleased`, one
    /// record with the reply's take) or ends without one (`Released`), so that a restart
    /// reopens a call whose request the server acknowledged and whose reply has not been
    /// taken. Off, `send_held` is `send`: the acknowledgement forgets the request, and its
    /// reply, coming to the restarted caller, finds no call and is discarded.
    pub hold_call_requests: bool,
    /// Messages sent again in fresh slots (their tokens' incarnation was lost: RETRY,
    /// LOST) ask for those slots whatever the slot window: they held slots before, so the
    /// receiver holds no more than it did. Off, they wait for room in the window like new
    /// messages: when the window has shrunk below the tokens the receiver holds untaken
    /// (after congestion or a restart of the sender) and the receiver's application waits
    /// for them before it takes those (an ordered channel), nothing ever moves again.
    pub resend_beyond_slot_window: bool,
    /// Tokens their receiver holds whole and untaken (HELD, or every byte GOT) leave the
    /// slot window as they leave the flight: once nothing else of the record is in flight
    /// or waiting to go, queued messages ask for slots beyond the tokens held (their
    /// receiver bounds what it holds by its untaken limits, and grants within them). Off,
    /// held tokens fill the window, and when the receiver's application waits for a
    /// message queued behind them (a channel's gap for a number given up, a message a
    /// restarted sender recovered without a slot), nothing moves again: `exon-sim --nodes 3
    /// --messages 2000 --loss 0.01 --reorder 0.5 --deadline-ms 100 --channels 16 --window 2
    /// --envelope-target 2 --envelope-low 1 --durable --restarts 1 --seed 339261265`,
    /// found by `scripts/sim-campaign.py`.
    pub held_outside_slot_window: bool,
    /// A retransmission timeout that finds only messages their receiver holds whole and
    /// untaken (HELD, or every byte GOT) asks about them with a few bytes, on a backoff of
    /// their own (doubled at each such timeout, answered or not, up to `max_rto`, until
    /// none is held; the first probe timeout and a receiver's probe do not ask sooner), and
    /// tells the congestion controller nothing: the path lost nothing, the receiver's
    /// application is slow or waits for another message first. Off, it was taken for a loss of the path: the window fell to its floor at
    /// every other probe of a message held long (an ordered flow behind a lost message, a
    /// slow reader), and the probes went every `max_backoff`.
    pub held_probes_back_off: bool,
    /// A message its receiver reports held whole (GOT) waits for its verdict under the
    /// retransmission timer, whose probe asks again for an ACK that was lost, even when
    /// the GOT came before this life of the sender sent any of it (a late copy reaching
    /// a restarted sender). Off, such a message has no timer: it is neither sent nor
    /// probed, and an ACK lost at its take (the sender was down then) leaves it in flight
    /// for ever. The same holds for a queued message that leaves the queue with nothing of
    /// it to send (reported held whole while it waited): the timer is armed then, since a
    /// timer that expired while it was queued passed it over.
    pub whole_awaits_verdict: bool,
    /// A receiver record whose free slots are all gone, left only with deliveries its
    /// application has not taken, grants a restarted sender's REQSLOTS whose frontier is
    /// past the record's end (the sender's clock jumped in its restart): such a request
    /// can waive nothing. Off, it is refused as implausible until the application takes
    /// those deliveries, which may wait for exactly a message the sender can then never
    /// send (an ordered channel's gap): both sides wait for ever.
    pub restarted_sender_gets_slots: bool,
    /// Durable mode (the endpoint's rule, `docs/channels.md`): a durable flow reserves room
    /// for its marks (`Limits::max_marks`) before it starts, so none goes on without them:
    /// a channel or stream this endpoint opens beyond the room is refused
    /// (`Error::TooManyFlows`), a peer's new stream is reset, a peer's new channel's
    /// messages are left undelivered (untaken). Off, a flow starts without room: its takes
    /// go on without a mark once the journal holds `max_marks` (its position lost at a
    /// restart: the channel starts over out of order), its first send is refused by the
    /// core.
    pub reserve_flow_marks: bool,
    /// Durable mode (the endpoint's rule, `docs/channels.md`): a durable flow's sender
    /// keeps its receiver's window in the flow's mark once it learns it (with the take of
    /// the window's advert, and in every later position of the same run). Off, the window
    /// is kept only with a message numbered after it was learnt: a sender restarted before
    /// sending one goes on one message at a time for good (its receiver advertised once).
    pub mark_flow_window: bool,
    /// Durable mode (issue 45: a payload journalled once): a receiver journals no payload
    /// for a message its sender keeps until the ACK (STOKEN, SFRAG; the ACK waits for the
    /// `Taken` record). It journals only that it handed the delivery over (`Handed`, before
    /// the hand-over), and after a restart delivers the sender's copy of such a slot not
    /// taken again, flagged as a redelivery under its id; any other slot of an incarnation
    /// the journal vouches for holds no delivery (LOST). Off, every delivery is journalled
    /// with its payload (`Delivered`) before it is handed over (`journal_before_delivery`),
    /// and recovered from the receiver's own journal.
    pub deliver_from_senders_copy: bool,
    /// With `deliver_from_senders_copy`: a receiver relies on its sender's copy only for
    /// a message whose sender says it keeps it until the ACK whatever happens (STOKEN,
    /// SFRAG), and journals the payload of any other (`Delivered`, not `Handed`). A durable
    /// sender says it of every message but three kinds: a reported one
    /// (`Node::send_reported`: an ordered flow may give it up, at a deadline or an abandon,
    /// while its receiver holds it untaken, and then sends a gap in its place); a reply
    /// (`Node::reply`: a restarted caller tells from its journal alone which calls had
    /// their reply handed out); and one it recovered after a restart (its journal does not
    /// say which kind it was). A node that is not durable says it of none (its copies die
    /// with it). Off, a durable sender says it of every message: a flow message its
    /// receiver handed over before a crash and its sender gave up is gone, and the gap sent
    /// for it is released after it.
    pub senders_copy_only_when_kept: bool,
    /// An early token (ETOKEN, ESTOKEN: its sender's records of it not yet on stable
    /// storage; also one recovered from a `DeliveredEarly` record after a restart) is
    /// handed over only once its sender says they are (a STORED frame covering its slot,
    /// or a stored copy of it); one its sender's frontier passes unstored is dropped
    /// unseen. Off, it is handed over as it arrives, and a sender that crashes before its
    /// records are synced sends the message again (a fresh slot, or the application's new
    /// send of a message never reported stored): delivered twice.
    pub early_token_waits_for_stored: bool,
    /// A receiver's probe (SLOTS with `n = 0`) for an incarnation in which the sender holds
    /// tokens that left more than a smoothed round trip ago makes it send them again at
    /// once: a receiver probes only after it heard nothing from the sender for a while, so
    /// those tokens (or their answers) were lost. Off, they wait for the sender's
    /// backed-off timer (up to `max_rto` after a path that failed one way heals). A probe
    /// draws one resend of each such token: the receiver's probes back off too.
    pub probe_prompts_resend: bool,
    /// A receiver's probe carries the ACK ranges it last sent the prober's sender, again:
    /// the probe draws the tokens that were not heard of (`probe_prompts_resend`), and
    /// when it is their ACKs that were lost, not the tokens, the answer to the probe is
    /// duplicates, answered by an ACK that may be lost the same way. Off, a path that loses
    /// each ACK datagram and passes the probe's (losses in step with the exchange, or a
    /// path dropping small datagrams) keeps the tokens in flight for ever, each probe
    /// drawing them once more.
    pub probe_repeats_ack: bool,
    /// A sender whose request a receiver answered with a probe of a record it holds
    /// nothing of (the sender restarted, its clock past the record's slots) owes the
    /// waiver of those slots until a request is granted, and sends it again before each
    /// transmission of its REQSLOTS. Off, the waiver leaves once, in answer to the probe:
    /// a path whose losses fall in step with the exchange (the request on its timer
    /// passing, each waiver after a probe lost) refuses the request for ever, and the
    /// sender's messages are never sent.
    pub request_carries_waiver: bool,
    /// A receiver's probe carries the verdicts it last answered the prober's sender for
    /// an incarnation not its own (DOUBT, RETRY, LOST for one lost in a restart or evicted,
    /// ACK for one spent and removed), again. Off, a path whose losses fall in step with
    /// the exchange (each retransmission's answer lost, each probe passing) leaves those
    /// tokens in flight for ever: the probe draws nothing of an incarnation not its own.
    pub probe_repeats_old_verdicts: bool,
    /// A receiver's probe carries its last grant again (SLOTS(s, r, n)) while none of
    /// those slots was used or waived: the sender may never have had it. Off, a path whose
    /// losses fall in step with the exchange (each request passing on its timer, each
    /// SLOTS answering it lost, each probe passing) never lets the sender's messages go.
    pub probe_repeats_grant: bool,
    /// A receiver's probe carries the GOT of the messages in progress that fragments came
    /// for since the last probe, again. Off, a path whose losses fall in step with the
    /// exchange (each GOT lost, each probe passing, every other fragment of each resend
    /// lost) keeps a large message in flight for ever, its sender resending the same
    /// fragments.
    pub probe_repeats_got: bool,
    /// Durable mode: a token of an incarnation lost in a restart that the journal covers,
    /// in a slot below the frontier past which the receiver forgot its sender's taken
    /// deliveries (raised to every frontier the sender reports, and journalled), is answered
    /// DOUBT, not LOST (the journal no longer knows whether that slot was filled); so is
    /// one below that frontier in a record that lives on, or below a frontier that waived
    /// free slots of the record (durable or not), not the ACK of a duplicate (the lost
    /// run's frontier may have waived the slot unfilled). An
    /// honest sender never sends below its reported frontier (its late duplicates' DOUBT
    /// is stale to it, `stale_verdicts_ignored`); a sender restored from an older copy of
    /// its directory does, with a message delivered, or given up, after the copy was
    /// taken. Off, it gets LOST, sends the message again in a fresh slot, and the message
    /// is delivered twice; or the ACK, and a message never delivered is reported so.
    pub doubt_below_forgotten: bool,
    /// A durable sender's early delivery dropped unseen (its sender's frontier passed its
    /// slot before the sender's word that the token was stored came; the receiver durable
    /// or not) counts as a slot waived unfilled: a token there gets DOUBT, not the ACK of a
    /// duplicate; the take that drops it answers DOUBT, not ACK; and a take a durable
    /// receiver's archive holds below the forgotten frontier (stored after that frontier's
    /// `Confirmed`, as the drop's is; kept until the archive's probe brings the frontier
    /// again) answers DOUBT, not ACK, once the record is gone. An honest sender holds no
    /// token there (its frontier passed); a sender restored from an older copy of its
    /// directory, taken after it stored the message, sends it again there. Off, that
    /// sender is told ACK for a message never delivered (`exon-sim --nodes 2 --messages
    /// 2000 --loss 0.05 --reorder 0.5 --partitions 1 --restarts 3 --durable --restore 1
    /// --deadline-ms 100 --restore-forgets-deadlines --seed 7`).
    pub dropped_unseen_doubt: bool,
    /// Durable mode: a message a RETRY or LOST moves out of a journalled slot gets an
    /// `Unassigned` record, and the sender's frontier stays below that slot until the
    /// record is durable. Off, the frontier passes the slot at once, while the journal
    /// still assigns it: after a crash the message goes again in that slot, below a
    /// frontier its receiver was told (and, with `doubt_below_forgotten`, gets DOUBT).
    pub frontier_waits_for_moves: bool,
    /// A source gets at most its share of the untaken deliveries
    /// (`Limits::max_untaken_per_source`, `max_untaken_bytes_per_source`): beyond, its
    /// TOKENs wait and it gets no new slots while other sources go on. Off, one source
    /// holding deliveries its application cannot take yet (an ordered flow's messages far
    /// beyond their turn) fills `max_untaken` and stops delivery from every source.
    pub untaken_share_per_source: bool,
    /// A REQCREDIT (whose receiver, if it lost the incarnation, answers with the verdict of
    /// the slot it names) names, each time it goes unanswered, the next message waiting
    /// for credit, whether or not the sender holds a grant in that incarnation (one made
    /// before the receiver restarted proves nothing). Off, it always names the oldest: a receiver that holds that one untaken (a recovered delivery its
    /// application takes only after another of the waiting messages, a stream's later
    /// chunk) never answers, and none of them ever moves again.
    pub credit_asks_each_waiting: bool,
    /// Durable mode: a FRAG of a delivery a restart handed over again and the application
    /// has not taken yet (no live record holds its incarnation) is answered HELD (held
    /// whole), as a live record answers for its held deliveries. Off, it gets no answer:
    /// its sender keeps it in flight and sends it again and again, and when the
    /// application waits for another message first (a stream's earlier chunk), that one
    /// may never find room in the congestion window.
    pub report_recovered_held: bool,
    /// Beyond the paper (large messages on long paths): a sender whose message waits for
    /// reassembly credit asks for at least twice the grant it ran out of (within the
    /// receiver's cap), so its credit keeps up with its rate in a few round trips. Off, it
    /// asks for what its messages in progress and the waiting one need, and a stream of
    /// fragmented chunks gains one chunk of credit per round trip: on a 100 ms path its
    /// startup is held below the congestion window for seconds.
    pub credit_doubles: bool,
    /// Request/reply (the endpoint's rule, `docs/rpc.md`; the simulator's server model): a
    /// server's reply told in doubt (its caller restarted and lost the incarnation whose
    /// envelope carried it) is sent once more as a message of its own, in the caller's
    /// new incarnation; a caller that had the first copy discards the second (matched by
    /// call id). Off, the call of a caller restarted without its journal whose reply went
    /// in an envelope from before the restart waits for its deadline and ends executed
    /// without a reply.
    pub resend_doubted_replies: bool,
    /// Beyond the notes (acknowledgements on slow paths): ACKs that would leave alone
    /// (`AckConfig::ride_paced_tokens`) wait for the next datagram the pacer lets go to
    /// their peer when one datagram at the pacing rate takes longer than their usual wait
    /// (the ACK delay, an eighth of the minimum RTT): at most a datagram's time and a
    /// minimum RTT. Off, on a 1 Mbit/s path every reply's ACK went in a datagram of its
    /// own between two requests, four in ten of a caller's datagrams.
    pub acks_wait_for_a_paced_datagram: bool,
    /// Beyond the notes (congestion control, sharing a small path): BBR takes the flows
    /// sharing its queue not to yield to loss when its smoothed loss rate stays above 2 %
    /// and above one datagram in each of its bandwidth-delay products. Off, 2 % alone: on a
    /// 10 Mbit/s, 20 ms path, where flows that yield lose a datagram in most rounds
    /// between them, its cuts went mild and it took 0.71-0.77 of the link from TCP.
    pub unyielding_loss_per_product: bool,
    /// Beyond the notes (congestion control, sharing with loss-based flows): after a full
    /// cut whose round lost less than eight full datagrams' worth, BBR takes the flows
    /// sharing its queue not to yield only if the queue kept more than 0.7 of its delay,
    /// not 0.55: an overflow of a few datagrams may miss a loss-based flow, which then
    /// holds its bytes, and the queue keeps what this flow's cut alone leaves. Off, on a
    /// 10 Mbit/s, 20 ms path such cuts marked TCP CUBIC as not yielding after many of
    /// them, and exon took more than two thirds of the link in 8 of 16 runs (2 of 21 with
    /// the bound at 0.75, none of 11 at 0.7).
    pub drain_test_counts_losses: bool,
}

impl Rules {
    /// Every correction on.
    pub const ALL: Rules = Rules {
        first_send_requests_slots: true,
        token_before_frontier: true,
        token_keeps_incarnation: true,
        ack_without_record: true,
        raise_clock_on_orphan_slots: true,
        bounded_input: true,
        receiver_probe: true,
        doubt_lost_incarnations: true,
        plausible_input: true,
        unproven_probe_limit: true,
        ack_on_take: true,
        deadline_doubts_sent_tokens: true,
        deadline_remembers_whole_copies: true,
        fragments_need_credit: true,
        deaf_backoff: true,
        evict_silent_records: true,
        remember_evicted_slots: true,
        fresh_records_kept: true,
        credit_return_resumes: true,
        abandon_tells_frontier: true,
        forgotten_keys_refused: true,
        progress_within_reassembly_timeout: true,
        progress_oldest_first: true,
        progress_past_all_sent: true,
        progress_measured: true,
        reordering_allowance: true,
        parked_early_probes: true,
        stale_verdicts_ignored: true,
        got_charges_partials: true,
        got_forgets_dropped_bytes: true,
        abandon_wakes_sender: true,
        pin_member_keys: true,
        address_cookies: true,
        reordering_window: true,
        spurious_undo: true,
        random_loss_made_up: true,
        receipt_times: true,
        clock_waits_for_store: true,
        journal_before_delivery: true,
        journal_before_ack: true,
        journal_before_token: true,
        journal_before_verdict: true,
        reply_in_one_record: true,
        journal_covers_incarnations: true,
        deadline_verdict_after_record: true,
        report_stored_verdicts: true,
        advertise_flow_window: true,
        hold_beyond_window: true,
        recover_calls: true,
        mark_in_one_record: true,
        durable_flows: true,
        hold_call_requests: true,
        resend_beyond_slot_window: true,
        held_outside_slot_window: true,
        held_probes_back_off: true,
        whole_awaits_verdict: true,
        restarted_sender_gets_slots: true,
        reserve_flow_marks: true,
        mark_flow_window: true,
        deliver_from_senders_copy: true,
        senders_copy_only_when_kept: true,
        early_token_waits_for_stored: true,
        probe_prompts_resend: true,
        probe_repeats_ack: true,
        request_carries_waiver: true,
        probe_repeats_old_verdicts: true,
        probe_repeats_grant: true,
        probe_repeats_got: true,
        doubt_below_forgotten: true,
        dropped_unseen_doubt: true,
        frontier_waits_for_moves: true,
        untaken_share_per_source: true,
        credit_asks_each_waiting: true,
        report_recovered_held: true,
        credit_doubles: true,
        resend_doubted_replies: true,
        acks_wait_for_a_paced_datagram: true,
        unyielding_loss_per_product: true,
        drain_test_counts_losses: true,
    };
}

impl Default for Rules {
    fn default() -> Self {
        Rules::ALL
    }
}
