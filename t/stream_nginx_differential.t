#!/usr/bin/perl

# sluice's stream module beside nginx's (Debian's /usr/sbin/nginx 1.22 with
# ngx_stream_module.so): the same stream servers in both, the same TCP
# sessions sent to each, and what a user sees compared: the bytes the
# client gets back (and when the session closes), what the backend
# receives, the session's access log line (a format with most stream
# variables) and the error log lines the session causes. Covered:
# proxy_pass to backends that echo, greet, stay silent, close or reset;
# return with variables; map (regex, named captures, a map of a map); set;
# allow/deny (403); limit_conn (503); a refused and a hanging backend
# (502, next upstream, "no live upstreams"); proxy_pass with variables;
# PROXY protocol v1/v2 on the listener (with and without realip) and
# proxy_protocol on toward the upstream; ssl_preread with hand-made
# ClientHellos; proxy_timeout, proxy_half_close, clients that send nothing.
# What must differ is normalised: ports (named: ECHO, LPORT, CPORT ...),
# times (a number or '-', item by item), connection numbers, error log
# timestamps and pids. nginx and its backends run in a child at the same
# time as sluice and its own backends. Each case is one test that lists
# every difference (and the access log fields that differ); nginx's [info]
# lines of every session (connected, disconnected) are compared in one test
# of their own; at the end, which fields differed in which cases.
# TEST_STREAM_DIFF_SHOW=1 shows what nginx did in every case.
# Left out on purpose, as sluice.conf(5) says: $nginx_version (the nginx
# version sluice follows), the per-server error_log (sluice writes every
# message to the main error log), and a broken PROXY header in the error
# log past its first CR or LF (sluice shows it up to there); and, case by
# case, the differences %KNOWN lists (each with its reason).

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Socket qw/SOL_SOCKET SO_LINGER/;
use POSIX qw/:sys_wait_h/;
use Errno qw/ECONNRESET/;
use Time::HiRes qw/time sleep/;
use Data::Dumper ();

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';
my $NGX_STREAM = '/usr/lib/nginx/modules/ngx_stream_module.so';
plan(skip_all => 'no nginx stream module') unless -f $NGX_STREAM;

###############################################################################
# Backends: one process, a listener per mode, a child per connection. Each
# connection is logged as "open ID MODE" when accepted and "close ID MODE
# HEX" (every byte it read) when it ends.

my %BACKEND = (
	echo => 0,       # sends back what it reads
	banner => 1,     # greets first ("220 banner\r\n"), then echoes
	silent => 2,     # reads, never writes
	close => 3,      # closes at once
	reset => 4,      # reads once, then resets (RST)
	byeonfin => 5,   # echoes; on EOF sends "bye\n" and closes
	shutfirst => 6,  # sends "x\n", shuts its write side, reads to EOF
	greet => 10,     # greets first ("220 banner\r\n"), then only reads
);
my ($DOWN, $DOWN2) = (7, 9);  # nothing listens
my $HOLE = 8;                 # a listener that never accepts (connect hangs)

sub backend_main {
	my ($log, $ready, %ports) = @_;
	my (%mode, @l);
	for my $m (keys %ports) {
		my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$ports{$m}", Listen => 64,
			ReuseAddr => 1) or die "backend $m: $!\n";
		$mode{fileno $s} = $m;
		push @l, $s;
	}
	open my $r, '>', $ready;
	close $r;
	$SIG{CHLD} = 'IGNORE';
	my $sel = IO::Select->new(@l);
	my $id = 0;
	while (1) {
		for my $ls ($sel->can_read) {
			my $c = $ls->accept or next;
			my $m = $mode{fileno $ls};
			$id++;
			logline($log, "open $id $m\n");
			my $pid = fork();
			if (defined $pid && $pid == 0) {
				close $_ for @l;
				alarm(10);
				my $got = serve($c, $m);
				logline($log, "close $id $m " . unpack('H*', $got) . "\n");
				POSIX::_exit(0);
			}
			close $c;
		}
	}
}

sub logline {
	my ($log, $line) = @_;
	open my $fh, '>>', $log or return;
	syswrite($fh, $line);
	close $fh;
}

sub serve {
	my ($c, $m) = @_;
	my $got = '';
	my $sel = IO::Select->new($c);
	if ($m eq 'close') {
		close $c;
		return $got;
	}
	if ($m eq 'reset') {
		my $b;
		$got .= $b if $sel->can_read(3) && $c->sysread($b, 65536);
		setsockopt($c, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
		close $c;
		return $got;
	}
	$c->syswrite("220 banner\r\n") if $m eq 'banner' || $m eq 'greet';
	if ($m eq 'shutfirst') {
		$c->syswrite("x\n");
		shutdown($c, 1);
	}
	while ($sel->can_read(8)) {
		my $n = $c->sysread(my $b, 65536);
		last unless $n;
		$got .= $b;
		$c->syswrite($b) if $m eq 'echo' || $m eq 'banner' || $m eq 'byeonfin';
	}
	$c->syswrite("bye\n") if $m eq 'byeonfin';
	close $c;
	return $got;
}

###############################################################################
# A TLS ClientHello made by hand (for ssl_preread): options sni, alpn (a
# list), versions (supported_versions, a list of numbers, with a key share;
# without it a TLS 1.2 hello), legacy (the hello's version), records (split
# the handshake message over this many TLS records).

sub client_hello {
	my (%o) = @_;
	my @ext;
	if (defined $o{sni}) {
		my $list = pack('Cn', 0, length $o{sni}) . $o{sni};
		push @ext, pack('nnn', 0, length($list) + 2, length $list) . $list;
	}
	push @ext, pack('nnn', 10, 6, 4) . pack('nn', 0x001d, 0x0017);
	push @ext, pack('nnn', 13, 8, 6) . pack('nnn', 0x0403, 0x0804, 0x0401);
	if ($o{alpn}) {
		my $l = join('', map { pack('C', length) . $_ } @{$o{alpn}});
		push @ext, pack('nnn', 16, length($l) + 2, length $l) . $l;
	}
	if ($o{versions}) {
		my $v = pack('n*', @{$o{versions}});
		push @ext, pack('nnC', 43, length($v) + 1, length $v) . $v;
		push @ext, pack('nnCC', 45, 2, 1, 1);
		my $ks = pack('nn', 0x001d, 32) . ("\x33" x 32);
		push @ext, pack('nnn', 51, length($ks) + 2, length $ks) . $ks;
	}
	my $exts = join('', @ext);
	my $body = pack('n', $o{legacy} // 0x0303) . ("\x11" x 32) . pack('C', 32) . ("\x22" x 32)
		. pack('n', 6) . pack('nnn', 0x1301, 0xc02f, 0x009c) . pack('CC', 1, 0)
		. pack('n', length $exts) . $exts;
	my $hs = pack('C', 1) . substr(pack('N', length $body), 1) . $body;
	my $n = $o{records} // 1;
	my $size = int((length($hs) + $n - 1) / $n);
	my $out = '';
	while (length $hs) {
		my $piece = substr($hs, 0, $size, '');
		$out .= pack('Cnn', 22, 0x0301, length $piece) . $piece;
	}
	return $out;
}

# PROXY protocol v2: the PROXY command, TCP over IPv4.
sub pp2 {
	my ($src, $dst, $sport, $dport) = @_;
	my $addr = pack('C4 C4 n n', split(/\./, $src), split(/\./, $dst), $sport, $dport);
	return "\r\n\r\n\0\r\nQUIT\n" . pack('CCn', 0x21, 0x11, length $addr) . $addr;
}

###############################################################################
# The client's side: connections, what it reads, and a transcript.

my @CPORTS;  # local ports of the client's connections in this case

sub conn {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'tcp', Timeout => 3)
		or return undef;
	push @CPORTS, $s->sockport;
	return $s;
}

sub say_ {
	my ($s, $data) = @_;
	local $SIG{PIPE} = 'IGNORE';
	my $n = $s->syswrite($data);
	return defined $n ? '' : " <write failed: $!>";
}

sub esc {
	my ($b) = @_;
	$b =~ s/([^\x20-\x7e])/sprintf('\\x%02X', ord $1)/ge;
	return $b;
}

# Reads until $n bytes came (with $suffix: until what came ends with it),
# or EOF, or $secs passed; returns what came (escaped) and, unless it came
# whole, how it ended.
sub hear {
	my ($s, $n, $secs, $suffix) = @_;
	my $buf = '';
	my $end = '';
	my $sel = IO::Select->new($s);
	my $until = time() + ($secs // 3);
	while (defined $suffix ? substr($buf, -length $suffix) ne $suffix : length($buf) < $n) {
		my $left = $until - time();
		if ($left <= 0 || !$sel->can_read($left)) {
			$end = ' <nothing more>';
			last;
		}
		my $r = $s->sysread($buf, 65536, length $buf);
		if (!defined $r) {
			$end = $! == ECONNRESET ? ' <reset>' : " <error $!>";
			last;
		}
		if ($r == 0) {
			$end = ' <eof>';
			last;
		}
	}
	return '"' . esc($buf) . '"' . $end;
}

# Reads until EOF (or a reset, or $secs); with $timeout (seconds), also
# says whether that came at once, after about that long, or else when.
sub hear_end {
	my ($s, $secs, $timeout) = @_;
	my $t0 = time();
	my $r = hear($s, 1 << 30, $secs // 3);
	return $r unless $timeout;
	my $e = time() - $t0;
	return $r . ($e < $timeout / 2 ? ' at once'
		: $e >= $timeout * 0.8 && $e < $timeout + 0.7 ? ' after the timeout'
		: sprintf(' after %.1fs', $e));
}

###############################################################################
# The cases: a stream server's directives (LISTEN is its port), its listen
# parameters, what the client does, how many access log lines it makes.

my $hello = client_hello(sni => 'pre.example', alpn => ['h2', 'http/1.1'],
	versions => [0x0304, 0x0303]);
my $big = 'abcdefghij' x 10000;

sub plain {
	my ($send) = @_;
	return sub {
		my $s = conn(shift) or return 'no connection';
		my $w = say_($s, $send);
		my $r = hear($s, length $send, 3, $send);
		close $s;
		return "sent$w, got $r";
	};
}

sub send_then_end {
	my ($send, $secs, $timeout) = @_;
	return sub {
		my $s = conn(shift) or return 'no connection';
		my $w = length $send ? say_($s, $send) : '';
		my $r = hear_end($s, $secs, $timeout);
		close $s;
		return "sent$w, got $r";
	};
}

sub idle_close {
	return sub {
		my $s = conn(shift) or return 'no connection';
		sleep 0.2;
		close $s;
		return 'closed after 0.2s';
	};
}

my @cases = (
	{ name => 'proxy_echo', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => plain("hello\n") },
	{ name => 'proxy_big', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, $big);
			my $r = hear($s, length $big);
			close $s;
			return 'sent ' . length($big) . " bytes$w, got "
				. ($r eq "\"$big\"" ? 'them back' : substr($r, 0, 80) . '...');
		} },
	{ name => 'proxy_upstream_block', conf => 'proxy_pass u_echo;',
		client => plain("via block\n") },
	{ name => 'proxy_banner_client_silent', conf => 'proxy_pass 127.0.0.1:BANNER;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $r = hear($s, 12);
			close $s;
			return "got $r";
		} },
	{ name => 'proxy_client_idle_close', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => idle_close() },
	{ name => 'proxy_client_sends_and_closes', conf => 'proxy_pass 127.0.0.1:SILENT;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "fire and forget\n");
			sleep 0.2;
			close $s;
			return "sent$w, closed";
		} },
	{ name => 'proxy_upstream_closes', conf => 'proxy_pass 127.0.0.1:CLOSE;',
		client => send_then_end('') },
	{ name => 'proxy_upstream_resets', conf => 'proxy_pass 127.0.0.1:RESET;',
		client => send_then_end("poke\n") },
	{ name => 'hash_pick', conf => 'proxy_pass u_hash;', client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "h\n");
			my $r = hear($s, 2, 1);
			close $s;
			return "sent$w, got $r";
		} },
	{ name => 'proxy_rr_two_sessions', conf => 'proxy_pass u_rr;', lines => 2,
		client => sub {
			my $p = shift;
			my @r;
			for my $i (1, 2) {
				my $s = conn($p) or return 'no connection';
				push @r, "session $i: " . hear($s, 12, 1);
				close $s;
				sleep 0.1;
			}
			return join('; ', @r);
		} },

	# return, map, set
	{ name => 'return_vars', conf => 'return "ra=$remote_addr rp=$remote_port sa=$server_addr sp=$server_port '
			. 'p=$protocol st=$status c=$connection bs=$bytes_sent br=$bytes_received\n";',
		client => send_then_end('') },
	{ name => 'return_maps', conf => 'return "m=$m mr=$mr oct=$oct mm=$mm mp=$mp\n";',
		client => send_then_end('') },
	{ name => 'return_empty', conf => 'return "";', client => send_then_end('') },
	{ name => 'return_upstream_vars', conf => 'return "ua=$upstream_addr ub=$upstream_bytes_sent '
			. 'pp=$proxy_protocol_addr sni=$ssl_preread_server_name\n";',
		client => send_then_end('') },
	{ name => 'set_vars', fmt => 'withset', conf => 'set $v "set-$m-$server_port"; set $w "$v+"; return "v=$v w=$w\n";',
		client => send_then_end('') },
	{ name => 'set_proxy', fmt => 'withset', conf => 'set $v "$remote_addr"; proxy_pass 127.0.0.1:ECHO;',
		client => plain("set\n") },
	{ name => 'set_elsewhere_logged', fmt => 'withset', conf => 'return "no set here\n";',
		client => send_then_end('') },
	{ name => 'proxy_pass_var_addr', conf => 'proxy_pass $to_echo;', client => plain("var\n") },
	{ name => 'proxy_pass_var_upstream', conf => 'set $up u_echo; proxy_pass $up;',
		client => plain("var up\n") },
	{ name => 'proxy_pass_var_no_port', conf => 'set $up nosuch; proxy_pass $up;',
		client => send_then_end('') },
	{ name => 'proxy_pass_var_no_resolver', conf => 'set $up nosuch.invalid:80; proxy_pass $up;',
		client => send_then_end('') },
	{ name => 'proxy_pass_var_bad_port', conf => 'set $up 127.0.0.1:99999; proxy_pass $up;',
		client => send_then_end('') },

	# access and limits
	{ name => 'deny', conf => 'deny 127.0.0.1; allow all; proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end('') },
	{ name => 'allow', conf => 'allow 127.0.0.1; deny all; proxy_pass 127.0.0.1:ECHO;',
		client => plain("allowed\n") },
	{ name => 'deny_all_return', conf => 'deny all; return "never\n";',
		client => send_then_end('') },
	{ name => 'limit_conn', conf => 'limit_conn lc 1; proxy_pass 127.0.0.1:ECHO;', lines => 2,
		client => sub {
			my $p = shift;
			my $a = conn($p) or return 'no connection';
			my $ra = (say_($a, 'a'), hear($a, 1))[1];
			my $b = conn($p) or return 'no second connection';
			my $rb = hear_end($b);
			my $ra2 = (say_($a, 'b'), hear($a, 1))[1];
			close $a;
			close $b;
			return "first got $ra, second got $rb, first then got $ra2";
		} },

	{ name => 'limit_conn_dry_run', conf => 'limit_conn lcd 1; limit_conn_dry_run on; '
			. 'limit_conn_log_level warn; proxy_pass 127.0.0.1:ECHO;', lines => 2,
		client => sub {
			my $p = shift;
			my $a = conn($p) or return 'no connection';
			my $ra = (say_($a, 'a'), hear($a, 1))[1];
			my $b = conn($p) or return 'no second connection';
			my $rb = (say_($b, 'b'), hear($b, 1))[1];
			close $b;
			sleep 0.1;
			close $a;
			return "first got $ra, second got $rb";
		} },

	# upstreams that fail
	{ name => 'down_502', conf => 'proxy_pass 127.0.0.1:DOWN;',
		client => send_then_end('') },
	{ name => 'down_then_up', conf => 'proxy_pass u_down_echo;', lines => 2,
		client => sub {
			my $p = shift;
			my @r;
			for my $i (1, 2) {
				my $s = conn($p) or return 'no connection';
				my $w = say_($s, "try $i\n");
				push @r, "session $i$w: " . hear($s, 6);
				close $s;
				sleep 0.1;
			}
			return join('; ', @r);
		} },
	{ name => 'down_backup', conf => 'proxy_pass u_backup;', client => plain("to backup\n") },
	{ name => 'down_no_next', conf => 'proxy_next_upstream off; proxy_pass u_down_echo2;',
		client => send_then_end('') },
	{ name => 'all_down_twice', conf => 'proxy_pass u_all_down;', lines => 2,
		client => sub {
			my $p = shift;
			my @r;
			for my $i (1, 2) {
				my $s = conn($p) or return 'no connection';
				push @r, "session $i: " . hear_end($s);
				close $s;
			}
			return join('; ', @r);
		} },
	{ name => 'connect_timeout', conf => 'proxy_connect_timeout 300ms; proxy_pass 127.0.0.1:HOLE;',
		client => send_then_end("wait\n", 3, 0.3) },
	{ name => 'client_leaves_while_connecting',
		conf => 'proxy_connect_timeout 500ms; proxy_pass 127.0.0.1:HOLE;',
		client => idle_close() },

	# timeouts and half-close
	{ name => 'proxy_timeout', conf => 'proxy_timeout 300ms; proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "tick\n");
			my $r = hear($s, 5);
			my $e = hear_end($s, 3, 0.3);
			close $s;
			return "sent$w, got $r, then $e";
		} },
	{ name => 'proxy_timeout_client_silent', conf => 'proxy_timeout 300ms; proxy_pass 127.0.0.1:SILENT;',
		client => send_then_end('', 3, 0.3) },
	{ name => 'half_close_off', conf => 'proxy_pass 127.0.0.1:BYEONFIN;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "hi\n");
			my $r = hear($s, 3);
			shutdown($s, 1);
			my $e = hear_end($s);
			close $s;
			return "sent$w, got $r, shut write, then $e";
		} },
	{ name => 'half_close_on', conf => 'proxy_half_close on; proxy_pass 127.0.0.1:BYEONFIN;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "hi\n");
			my $r = hear($s, 3);
			shutdown($s, 1);
			my $e = hear_end($s);
			close $s;
			return "sent$w, got $r, shut write, then $e";
		} },
	{ name => 'half_close_on_upstream_first', conf => 'proxy_half_close on; proxy_pass 127.0.0.1:SHUTFIRST;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $r = hear_end($s);
			my $w = say_($s, "after\n");
			sleep 0.2;
			close $s;
			return "got $r, then sent$w";
		} },
	{ name => 'half_close_off_upstream_first', conf => 'proxy_pass 127.0.0.1:SHUTFIRST;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $r = hear_end($s);
			my $w = say_($s, "after\n");
			sleep 0.2;
			close $s;
			return "got $r, then sent$w";
		} },

	# PROXY protocol on the listener
	{ name => 'pp_v1', listen => 'proxy_protocol', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\nhello\n");
			my $r = hear($s, 6);
			close $s;
			return "sent$w, got $r";
		} },
	{ name => 'pp_v1_realip', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\nhello\n");
			my $r = hear($s, 6);
			close $s;
			return "sent$w, got $r";
		} },
	{ name => 'pp_v1_return', listen => 'proxy_protocol', fmt => 'withset',
		conf => 'set_real_ip_from 127.0.0.1; set $v "$remote_addr:$remote_port"; '
			. 'return "ra=$remote_addr rp=$remote_port bra=$binary_remote_addr rra=$realip_remote_addr m=$m mr=$mr v=$v '
			. 'pp=$proxy_protocol_addr:$proxy_protocol_port>$proxy_protocol_server_addr:$proxy_protocol_server_port\n";',
		client => send_then_end("PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n") },
	{ name => 'pp_v1_tcp6', listen => 'proxy_protocol',
		conf => 'return "ra=$remote_addr pp=$proxy_protocol_addr:$proxy_protocol_port>$proxy_protocol_server_addr:$proxy_protocol_server_port\n";',
		client => send_then_end("PROXY TCP6 2001:db8::1 2001:db8::2 1000 2000\r\n") },
	{ name => 'pp_v1_unknown', listen => 'proxy_protocol',
		conf => 'return "ra=$remote_addr pp=[$proxy_protocol_addr]\n";',
		client => send_then_end("PROXY UNKNOWN\r\n") },
	{ name => 'pp_v2', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; return "ra=$remote_addr:$remote_port pp=$proxy_protocol_addr:$proxy_protocol_port>$proxy_protocol_server_addr:$proxy_protocol_server_port\n";',
		client => send_then_end(pp2('203.0.113.9', '198.51.100.3', 40000, 8443)) },
	{ name => 'pp_v2_local', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; return "ra=$remote_addr pp=[$proxy_protocol_addr]\n";',
		client => send_then_end("\r\n\r\n\0\r\nQUIT\n" . pack('CCn', 0x20, 0x00, 0)) },
	{ name => 'pp_bad_addr', listen => 'proxy_protocol', conf => 'return "pp=$proxy_protocol_addr\n";',
		client => send_then_end("PROXY TCP4 999.1.1.1 198.51.100.2 1 2\r\n") },
	{ name => 'pp_bad_port', listen => 'proxy_protocol', conf => 'return "pp=$proxy_protocol_port\n";',
		client => send_then_end("PROXY TCP4 192.0.2.1 198.51.100.2 65536 2\r\n") },
	{ name => 'pp_broken', listen => 'proxy_protocol', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end("GET / HTTP/1.0\r\n\r\n") },
	{ name => 'pp_client_silent_close', listen => 'proxy_protocol', conf => 'proxy_pass 127.0.0.1:ECHO;',
		client => idle_close() },
	{ name => 'pp_timeout', listen => 'proxy_protocol',
		conf => 'proxy_protocol_timeout 300ms; proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end('', 3, 0.3) },
	{ name => 'pp_deny_realip', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; deny 192.0.2.1; proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end("PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n") },

	# PROXY protocol toward the upstream
	{ name => 'pp_to_upstream', conf => 'proxy_protocol on; proxy_pass 127.0.0.1:ECHO;',
		client => plain("after header\n") },
	{ name => 'pp_to_upstream_client_silent', conf => 'proxy_protocol on; proxy_pass 127.0.0.1:GREET;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $r = hear($s, 12);
			close $s;
			return "got $r";
		} },
	{ name => 'pp_to_upstream_realip', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; proxy_protocol on; proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\nhi\n");
			my $r = hear($s, 3, 3, "hi\n");
			close $s;
			return "sent$w, got $r";
		} },
	{ name => 'pp_to_upstream_tcp6', listen => 'proxy_protocol',
		conf => 'set_real_ip_from 127.0.0.1; proxy_protocol on; proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, "PROXY TCP6 2001:db8::1 2001:db8::2 1000 2000\r\nhi\n");
			my $r = hear($s, 3, 3, "hi\n");
			close $s;
			return "sent$w, got $r";
		} },
	{ name => 'pp_to_upstream_retry', conf => 'proxy_protocol on; proxy_pass u_down_echo3;',
		client => plain("retried\n") },

	# ssl_preread
	{ name => 'preread_sni_alpn', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain($hello) },
	{ name => 'preread_tls12_no_sni', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello()) },
	{ name => 'preread_tls10', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => 'old.example', legacy => 0x0301)) },
	{ name => 'preread_grease_upper', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => 'Pre.Example.COM', alpn => ['h2'],
			versions => [0x0a0a, 0x0304, 0x0303])) },
	{ name => 'preread_sni_ip', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => '192.0.2.7', versions => [0x0304])) },
	{ name => 'preread_sni_trailing_dot', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => 'pre.example.', versions => [0x0304])) },
	{ name => 'preread_sni_underscore', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => 'my_host.example', versions => [0x0304])) },
	{ name => 'preread_split_segments', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, substr($hello, 0, 7));
			sleep 0.15;
			$w .= say_($s, substr($hello, 7));
			my $r = hear($s, length $hello);
			close $s;
			return "sent in two$w, got " . (length($r) - 2) . ' escaped bytes';
		} },
	{ name => 'preread_two_records', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain(client_hello(sni => 'two.example', versions => [0x0304], records => 2)) },
	{ name => 'preread_not_tls', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => plain("hello, not tls\n") },
	{ name => 'preread_route_map', conf => 'ssl_preread on; proxy_pass $sni_up;',
		client => sub {
			my $s = conn(shift) or return 'no connection';
			my $w = say_($s, $hello);
			my $r = hear($s, 12 + length $hello);
			close $s;
			return "sent$w, got " . substr($r, 0, 20) . '...';
		} },
	{ name => 'preread_client_silent_close', conf => 'ssl_preread on; proxy_pass 127.0.0.1:ECHO;',
		client => idle_close() },
	{ name => 'preread_timeout', conf => 'ssl_preread on; preread_timeout 300ms; proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end(substr($hello, 0, 3), 3, 0.3) },
	{ name => 'preread_buffer_full', conf => 'ssl_preread on; preread_buffer_size 100; proxy_pass 127.0.0.1:ECHO;',
		client => send_then_end($hello) },
	{ name => 'preread_down', conf => 'ssl_preread on; proxy_pass 127.0.0.1:DOWN;',
		client => send_then_end($hello) },
	{ name => 'preread_vars_without_preread', conf => 'return "sni=[$ssl_preread_server_name] '
			. 'alpn=[$ssl_preread_alpn_protocols] p=[$ssl_preread_protocol]\n";',
		client => send_then_end('') },
);

###############################################################################
# The configuration, one text for both.

my $fmt = 'ra=$remote_addr rp=$remote_port bra=$binary_remote_addr sa=$server_addr sp=$server_port '
	. 'proto=$protocol st=$status bs=$bytes_sent br=$bytes_received '
	. 'ua=$upstream_addr ubs=$upstream_bytes_sent ubr=$upstream_bytes_received '
	. 'uct=$upstream_connect_time ufb=$upstream_first_byte_time ust=$upstream_session_time '
	. 'sess=$session_time c=$connection '
	. 'ppa=$proxy_protocol_addr ppp=$proxy_protocol_port ppsa=$proxy_protocol_server_addr '
	. 'ppsp=$proxy_protocol_server_port rra=$realip_remote_addr rrp=$realip_remote_port '
	. 'lcs=$limit_conn_status sni=$ssl_preread_server_name alpn=$ssl_preread_alpn_protocols '
	. 'sslp=$ssl_preread_protocol m=$m mr=$mr oct=$oct mm=$mm sc=$sni_class g=$geo sc2=$split '
	. 'h=$hostname';

my $stream = <<"EOF";
    log_format diff '$fmt';
    log_format withset '$fmt v=\$v w=\$w';

    map \$remote_addr \$m { 127.0.0.1 loop; 192.0.2.1 pp-client; default other; }
    map \$remote_addr \$mr { ~^(?<oct>\\d+)\\.(\\d+) "first-\$oct-\$2"; default none; }
    map \$m \$mm { loop "of-\$m"; default "d-\$mr"; }
    map \$protocol \$mp { ~^(T)(.)(.)\$ "\$3\$2\$1"; }
    map \$protocol \$to_echo { default 127.0.0.1:ECHO; }
    map \$ssl_preread_server_name \$sni_up { pre.example u_banner; default u_echo; }

    map \$ssl_preread_server_name \$sni_class { hostnames; *.example wild; pre.example exact; default none; }
    geo \$geo { default g-other; 127.0.0.0/8 g-loop; 192.0.2.0/24 g-doc; }
    split_clients "\$remote_addr" \$split { 50% s-a; * s-b; }

    limit_conn_zone \$binary_remote_addr zone=lc:1m;
    limit_conn_zone \$binary_remote_addr zone=lcd:1m;

    upstream u_echo { server 127.0.0.1:ECHO; }
    upstream u_banner { server 127.0.0.1:BANNER; }
    upstream u_rr { server 127.0.0.1:BANNER; server 127.0.0.1:SHUTFIRST; }
    upstream u_down_echo { server 127.0.0.1:DOWN; server 127.0.0.1:ECHO; }
    upstream u_down_echo2 { server 127.0.0.1:DOWN; server 127.0.0.1:ECHO; }
    upstream u_down_echo3 { server 127.0.0.1:DOWN; server 127.0.0.1:ECHO; }
    upstream u_all_down { server 127.0.0.1:DOWN; server 127.0.0.1:DOWN2; }
    upstream u_backup { server 127.0.0.1:DOWN; server 127.0.0.1:ECHO backup; }
    upstream u_hash { hash \$remote_addr; server 127.0.0.1:ECHO; server 127.0.0.1:BANNER; server 127.0.0.1:SHUTFIRST; }

EOF

for my $i (0 .. $#cases) {
	my $c = $cases[$i];
	my $listen = $c->{listen} ? " $c->{listen}" : '';
	my $f = $c->{fmt} // 'diff';
	$stream .= "    server { listen 127.0.0.1:LISTEN$i$listen; access_log logs/$c->{name}.log $f; $c->{conf} }\n";
}

my $t = Test::Sluice->new()->has(qw/stream/)->plan(scalar(@cases) + 1);
my $d = $t->testdir();

# Ports: each has its own backends (so that both run at once and each
# backend log is one's), sluice's from 8500, nginx's from 8600, and its own
# listening ports, sluice's 8100 + i, nginx's 8300 + i. In what is
# compared every port is named: ECHO, DOWN, LPORT (the case's listener),
# CPORT (the client's) ...
my %where = (
	sluice => { dir => $d, base => 8100, bk => 8500 },
	nginx => { dir => "$d/nginx_ref", base => 8300, bk => 8600 },
);
my %portname;
my %conf;
for my $who ('sluice', 'nginx') {
	my $w = $where{$who};
	$w->{errlog} = "$w->{dir}/error.log";
	$w->{blog} = "$w->{dir}/backend.log";
	(my $s = $stream) =~ s/LISTEN(\d+)/port($w->{base} + $1)/ge;
	my %bp = (%BACKEND, down => $DOWN, down2 => $DOWN2, hole => $HOLE);
	for my $m (sort { length $b <=> length $a } keys %bp) {
		my $p = port($w->{bk} + $bp{$m});
		$portname{$p} = uc $m;
		$s =~ s/:\U$m\E\b/:$p/g;
	}
	$conf{$who} = $s;
}

$t->write_file('sluice.conf', $t->test_globals() . "worker_processes 1;\n\nevents {\n}\n\n"
	. "stream {\n$conf{sluice}}\n");

my $nd = $where{nginx}{dir};
mkdir $nd;
mkdir "$nd/logs";
$t->write_file('nginx_ref/nginx.conf', "load_module $NGX_STREAM;\nworker_processes 1;\n"
	. "pid $nd/nginx.pid;\nerror_log $nd/error.log info;\nevents { }\n"
	. "stream {\n$conf{nginx}}\n");

# Both listen (and the backends) once the ports are released; a blackhole
# holds each HOLE.
Test::Sluice::_release_ports();
for my $w (values %where) {
	$t->run_daemon(\&backend_main, $w->{blog}, "$w->{dir}/backend.ready",
		map { $_ => port($w->{bk} + $BACKEND{$_}) } keys %BACKEND);
	$t->waitforfile("$w->{dir}/backend.ready") or die "backends did not start\n";
	$t->blackhole(port($w->{bk} + $HOLE));
}
$t->run();
$t->run_daemon('/usr/sbin/nginx', '-p', "$nd/", '-c', "$nd/nginx.conf", '-e', "$nd/error.log",
	'-g', 'daemon off; master_process on;');
$t->waitforfile("$nd/nginx.pid") or die "nginx did not start\n";
sleep 0.3;

###############################################################################
# Running a case on one of them, and what it made.

sub lines_of {
	my ($file) = @_;
	my $c = $t->read_file($file);
	return split /\n/, $c;
}

sub norm {
	my ($s, $lport) = @_;
	my %map = (%portname, $lport => 'LPORT');
	for my $i (0 .. $#CPORTS) {
		$map{$CPORTS[$i]} = @CPORTS > 1 ? 'CPORT' . ($i + 1) : 'CPORT';
	}
	$s =~ s/\b(\d{4,5})\b/$map{$1} \/\/ $1/ge;
	# The connection number, in a return's text as in the log.
	$s =~ s/\bc=\d+/c=N/g;
	return $s;
}

# The access log line, its variables' values made comparable: times are
# 'T' (a number) or '-', item by item of a list.
sub norm_access {
	my ($line, $lport) = @_;
	$line = norm($line, $lport);
	for my $k (qw/uct ufb ust sess/) {
		$line =~ s{\b$k=([^\s,]+(?:, [^\s,]+)*)}{
			"$k=" . join(', ', map { /^\d+\.\d{3}$/ ? 'T' : $_ } split /, /, $1)
		}e;
	}
	return $line;
}

# Error log entries (an entry may span lines: nginx writes a broken PROXY
# header as it came) without time, pid and connection number. sluice.conf(5)
# says sluice shows a broken header up to its first CR or LF: nginx's is
# cut there too.
sub error_entries {
	my ($text, $lport) = @_;
	my @e;
	for my $l (split /\n/, $text) {
		if ($l =~ /^\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d \[/ || !@e) {
			push @e, $l;
		} else {
			$e[-1] .= "\n$l";
		}
	}
	@e = grep { !/^\S+ \S+ \[debug\]/ } @e;
	for (@e) {
		s/^\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d (\[\w+\]) \d+#\d+: (\*\d+ )?/$1 . ($2 ? ' *N ' : ' ')/e;
		s/(broken header: "[^"\r\n]*)[\r\n][^"]*"/$1"/;
		s/\bproxy 127\.0\.0\.1:\d+ connected/proxy 127.0.0.1:UPORT connected/;
		$_ = norm($_, $lport);
	}
	return @e;
}

# nginx's [info] lines of every stream session (connected, proxy
# connected, disconnected with its byte counts): compared apart, in one
# test of their own at the end.
sub session_info { $_[0] =~ /^\[info\] \*N (?:client \S+ connected to|proxy \S+ connected to|(?:client|upstream) disconnected,)/ }

sub run_case {
	my ($c, $i, $who) = @_;
	my $w = $where{$who};
	my $lport = port($w->{base} + $i);
	my $alog = "$w->{dir}/logs/$c->{name}.log";
	my $err0 = -s $w->{errlog} // 0;
	my @b0 = lines_of($w->{blog});
	@CPORTS = ();
	my $client = $c->{client}->($lport);
	my $want = $c->{lines} // 1;
	my @acc;
	poll(sub { @acc = lines_of($alog); @acc >= $want }, 3);
	# The backend's connections of this case, once they ended.
	my (@opened, %closed);
	poll(sub {
		my @b = lines_of($w->{blog});
		splice(@b, 0, scalar @b0);
		@opened = map { /^open (\d+) (\w+)/ ? $1 : () } @b;
		%closed = map { /^close (\d+) (\w+) ?(\S*)/ ? ($1 => "$2 \"" . esc(pack('H*', $3)) . '"') : () } @b;
		!grep { !exists $closed{$_} } @opened;
	}, 3);
	sleep 0.05;
	@acc = lines_of($alog);
	my $err = substr($t->read_file($w->{errlog}), $err0);
	my @err = error_entries($err, $lport);
	return {
		client => norm($client, $lport),
		backend => join(' | ', map { norm($closed{$_} // 'still open', $lport) } @opened) || 'none',
		access => join("\n", map { norm_access($_, $lport) } @acc) || 'none',
		errors => join("\n", grep { !session_info($_) } @err) || 'none',
		info => join("\n", grep { session_info($_) } @err) || 'none',
	};
}

sub poll {
	my ($code, $secs) = @_;
	my $until = time() + $secs;
	while (time() < $until) {
		return 1 if $code->();
		sleep 0.01;
	}
	return $code->();
}

# The fields of two access log lines that differ: "name: nginx 'x', sluice 'y'".
sub field_diff {
	my ($n, $s) = @_;
	my @n = split /\n/, $n;
	my @s = split /\n/, $s;
	return () if @n != @s;
	my @out;
	for my $i (0 .. $#n) {
		my %nf = map { /^(\w+)=(.*)$/s ? ($1 => $2) : () } split / (?=\w+=)/, $n[$i];
		my %sf = map { /^(\w+)=(.*)$/s ? ($1 => $2) : () } split / (?=\w+=)/, $s[$i];
		my @k = grep { ($nf{$_} // '<none>') ne ($sf{$_} // '<none>') }
			map { /^(\w+)=/ ? $1 : () } split / (?=\w+=)/, $n[$i];
		push @out, map { [$i + 1, $_, $nf{$_} // '<none>', $sf{$_} // '<none>'] } @k;
	}
	return @out;
}

###############################################################################

# nginx's sessions in a child, sluice's here, at the same time; the child
# hands its results over in a file.
my $theirs = "$d/nginx_results";
my $pid = fork() // die "fork: $!\n";
if ($pid == 0) {
	eval {
		my @r = map { run_case($cases[$_], $_, 'nginx') } 0 .. $#cases;
		local $Data::Dumper::Indent = 0;
		local $Data::Dumper::Useqq = 1;
		open my $fh, '>', "$theirs.tmp" or die;
		print $fh Data::Dumper::Dumper(\@r);
		close $fh;
		rename "$theirs.tmp", $theirs;
	};
	POSIX::_exit(0);
}
my @ours = map { run_case($cases[$_], $_, 'sluice') } 0 .. $#cases;
waitpid($pid, 0);
my $VAR1;
my $ref = eval($t->read_file($theirs)) or die "no results from the nginx side\n";

# Differences kept on purpose, as sluice.conf(5) says: what may differ
# in each case (a part, or only these access log fields).
my %KNOWN = (
	# nginx caches $bytes_sent once a return's text has read it (0); sluice
	# logs the count at the end.
	return_vars => { access => [qw/bs/] },
	# sluice reads what the client sends while it connects (nginx does not,
	# and resets the connection at the timeout); it peeks while prereading
	# (nginx reads, and closes cleanly).
	connect_timeout => { client => 1 },
	preread_timeout => { client => 1 },
	# sluice sees a client leave while the upstream connects and ends the
	# session (499, logged at info); nginx waits for the connect timeout.
	client_leaves_while_connecting => { access => [qw/st ua ubs ubr ust/], errors => 1 },
	# A named capture of a map regex that did not match is logged empty
	# (nginx: -), as a variable set elsewhere is.
	pp_to_upstream_tcp6 => { access => [qw/oct/] },
);

my (%fields, @info);
for my $i (0 .. $#cases) {
	my $c = $cases[$i];
	my ($n, $s) = ($ref->[$i], $ours[$i]);
	my $known = $KNOWN{$c->{name}} // {};
	my @diff;
	for my $k (qw/client backend access errors/) {
		next if $n->{$k} eq $s->{$k};
		next if $known->{$k} && !ref $known->{$k};
		if ($k eq 'access' && ref $known->{$k}) {
			my %may = map { $_ => 1 } @{$known->{$k}};
			my @f = field_diff($n->{access}, $s->{access});
			next if @f && !grep { !$may{$_->[1]} } @f;
		}
		my $text = "  $k:\n    nginx:  " . join("\n            ", split /\n/, $n->{$k})
			. "\n    sluice: " . join("\n            ", split /\n/, $s->{$k});
		if ($k eq 'access') {
			my @f = field_diff($n->{access}, $s->{access});
			$fields{$_->[1]}{$c->{name}} = 1 for @f;
			$text = "  access log fields:\n" . join("\n", map {
				"    line $_->[0] \$$_->[1]: nginx '$_->[2]', sluice '$_->[3]'" } @f) . "\n$text"
				if @f;
		}
		push @diff, $text;
	}
	push @info, [$c->{name}, $n->{info}, $s->{info}] if $n->{info} ne $s->{info};
	ok(!@diff, "$c->{name}: sluice as nginx") or diag("case $c->{name} ($c->{conf}):\n"
		. join("\n", @diff));
	diag("case $c->{name}: " . join(' || ', map { "$_: $n->{$_}" } qw/client backend access errors info/))
		if $ENV{TEST_STREAM_DIFF_SHOW};
}

ok(!@info, 'the [info] lines of each session as nginx') or diag(join("\n", map {
	"case $_->[0]:\n    nginx:  " . join("\n            ", split /\n/, $_->[1])
	. "\n    sluice: " . join("\n            ", split /\n/, $_->[2]) } @info));

diag("access log fields that differed, and in which cases:\n" . join("\n",
	map { "  $_: " . join(', ', sort keys %{$fields{$_}}) } sort keys %fields)) if %fields;
